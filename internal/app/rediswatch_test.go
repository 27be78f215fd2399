package app

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/internal/testenv"
)

// lockedLog is a log buffer safe for a logger and a test at once.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestWatchRedisLogsAnOutageOnce: a client's failed calls against a
// stopped redis-server are logged once, with the URL and the cause, and
// its first answer after that once; a reply error (a wrong command) is
// Redis answering, not an outage.
func TestWatchRedisLogsAnOutageOnce(t *testing.T) {
	r := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: strings.TrimPrefix(r.URL(), "redis://"), MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	var log lockedLog
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	WatchRedis(ctx, c, r.URL(), slog.New(slog.NewTextHandler(&log, nil)))

	if err := c.Do(ctx, "NOSUCHCOMMAND").Err(); err == nil {
		t.Fatal("a wrong command succeeded")
	}
	r.Stop(t)
	for range 20 {
		if err := c.Ping(ctx).Err(); err == nil {
			t.Fatal("PING answered with Redis stopped")
		}
	}
	r.Start(t)
	testenv.Eventually(t, 10*time.Second, "PING answered", func() bool { return c.Ping(ctx).Err() == nil })

	got := log.String()
	for _, want := range []string{
		`level=WARN msg="Redis unreachable" url=` + r.URL() + ` cause="connection refused"`,
		`level=INFO msg="Redis answers again" url=` + r.URL(),
	} {
		if strings.Count(got, want) != 1 {
			t.Errorf("the log has %q %d times, want once:\n%s", want, strings.Count(got, want), got)
		}
	}
	if n := strings.Count(got, "\n"); n != 2 {
		t.Errorf("%d lines, want 2:\n%s", n, got)
	}
}

// TestWatchRedisIgnoresACallersDeadline: a call whose own deadline passes
// while it waits for the one connection of a busy pool says nothing of
// Redis, which answers the call holding it: no outage is logged.
func TestWatchRedisIgnoresACallersDeadline(t *testing.T) {
	r := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: strings.TrimPrefix(r.URL(), "redis://"), PoolSize: 1, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	var log lockedLog
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	WatchRedis(ctx, c, r.URL(), slog.New(slog.NewTextHandler(&log, nil)))

	held := make(chan error, 1)
	go func() { held <- c.BLPop(ctx, time.Second, "nothing-here").Err() }()
	// The BLPOP holds the pool's connection for a second; a PING given
	// 100 ms waits for it and gives up.
	var err error
	testenv.Eventually(t, 5*time.Second, "a PING that gave up waiting for the pool", func() bool {
		pctx, pcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer pcancel()
		err = c.Ping(pctx).Err()
		return err != nil
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("PING failed with %v, want its deadline passed", err)
	}
	if err := <-held; !errors.Is(err, redis.Nil) {
		t.Fatalf("BLPOP: %v, want redis.Nil after its second", err)
	}
	if got := log.String(); got != "" {
		t.Fatalf("a caller's deadline was logged as an outage:\n%s", got)
	}
}

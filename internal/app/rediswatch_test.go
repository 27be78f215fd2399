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

// TestWatchRedisClusterLogsAFailoverOnce: while a Redis Cluster's master
// is dead and its replica not yet promoted, calls to its keys fail and
// calls to the other masters' answer; the watch logs the outage once and
// its end once, after the takeover, not one line each by turns.
func TestWatchRedisClusterLogsAFailoverOnce(t *testing.T) {
	cl := testenv.StartRedisClusterWith(t, testenv.ClusterOptions{Masters: 3, Replicas: 1, NodeTimeout: time.Second})
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	var log lockedLog
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	WatchRedis(ctx, c, "redis://cluster", slog.New(slog.NewTextHandler(&log, nil)))
	// One key on each master, each a tag of its own third of the slots.
	keys := []string{"{slow}:k", "{mid}:k", "{fast}:k"}
	for _, k := range keys {
		if err := c.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	old, err := cl.MasterOf("{fast}")
	if err != nil {
		t.Fatal(err)
	}
	cl.KillNode(t, old)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			for _, k := range keys {
				_ = c.Get(ctx, k).Err()
			}
			c.ReloadState(ctx) // as the worker's client reads the slot map every second
			time.Sleep(20 * time.Millisecond)
		}
	}()
	cl.WaitFailover(t, "{fast}", old, 20*time.Second)
	testenv.Eventually(t, 20*time.Second, "the outage's end logged", func() bool { return strings.Contains(log.String(), "Redis answers again") })
	cancel()
	<-done
	got := log.String()
	if n := strings.Count(got, "Redis unreachable"); n != 1 {
		t.Errorf("the outage was logged %d times, want once:\n%s", n, got)
	}
	if n := strings.Count(got, "Redis answers again"); n != 1 {
		t.Errorf("its end was logged %d times, want once:\n%s", n, got)
	}
}

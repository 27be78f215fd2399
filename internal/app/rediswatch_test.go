package app

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/config"
	"github.com/throttler/throttler/internal/outage"
	"github.com/throttler/throttler/internal/testenv"
)

// TestWatchRedisLogsAnOutageOnce: a client's failed calls against a
// stopped redis-server are logged once, with the URL and the cause, its
// first answer after that once, and, the server being a new one, that it
// restarted; a reply error (a wrong command) is Redis answering, not an
// outage.
func TestWatchRedisLogsAnOutageOnce(t *testing.T) {
	r := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: strings.TrimPrefix(r.URL(), "redis://"), MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	var log testenv.Buffer
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
	testenv.Eventually(t, 10*time.Second, "the restart logged", func() bool {
		return strings.Contains(log.String(), `msg="Redis restarted while unreachable`)
	})

	got := log.String()
	for _, want := range []string{
		`level=WARN msg="Redis unreachable" url=` + r.URL() + ` cause="connection refused"`,
		`level=INFO msg="Redis answers again" url=` + r.URL(),
		`level=WARN msg="Redis restarted while unreachable`,
	} {
		if strings.Count(got, want) != 1 {
			t.Errorf("the log has %q %d times, want once:\n%s", want, strings.Count(got, want), got)
		}
	}
	if n := strings.Count(got, "\n"); n != 3 {
		t.Errorf("%d lines, want 3:\n%s", n, got)
	}
}

// TestWatchRedisIgnoresACallersDeadline: a call whose own deadline passes
// while it waits for the one connection of a busy pool says nothing of
// Redis, which answers the call holding it: no outage is logged.
func TestWatchRedisIgnoresACallersDeadline(t *testing.T) {
	r := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: strings.TrimPrefix(r.URL(), "redis://"), PoolSize: 1, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	var log testenv.Buffer
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
	var log testenv.Buffer
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

// silentWatch is a watch of one server, timed by c, that logs to log.
func silentWatch(c *testClock, log *testenv.Buffer) redisWatchHook {
	r := outage.New(outage.Options{Name: "Redis", Log: slog.New(slog.NewTextHandler(log, nil)), Now: c.now})
	return redisWatchHook{r: r, silent: &silentCalls{period: silentPeriod, now: c.now}}
}

// expired is a context whose deadline has passed, as a call's has when it
// ends at its deadline.
func expired(t *testing.T) context.Context {
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
	t.Cleanup(cancel)
	return ctx
}

// replyErr is an error reply of Redis (NOSCRIPT, WRONGTYPE).
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// TestWatchRedisReportsCallsSilentForAPeriod: calls that each end at their
// 2 s deadline, none answered, say nothing for less than silentPeriod and
// then log Redis unreachable once, dated from the first call; the first
// answer ends the outage.
func TestWatchRedisReportsCallsSilentForAPeriod(t *testing.T) {
	c := &testClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var log testenv.Buffer
	h := silentWatch(c, &log)
	ctx := expired(t)
	began := c.now()
	c.advance(2 * time.Second)
	for ; c.now().Sub(began) < silentPeriod; c.advance(100 * time.Millisecond) {
		h.report(ctx, c.now().Add(-2*time.Second), ctx.Err())
	}
	if got := log.String(); got != "" {
		t.Fatalf("calls silent for less than %s were logged:\n%s", silentPeriod, got)
	}
	for ; c.now().Sub(began) < 10*time.Second; c.advance(100 * time.Millisecond) {
		h.report(ctx, c.now().Add(-2*time.Second), ctx.Err())
	}
	if down, since := h.r.Down(); !down || !since.Equal(began) {
		t.Errorf("Down() = %v, %v; want true since the first silent call, %v", down, since, began)
	}
	h.report(context.Background(), c.now(), nil)
	got := log.String()
	want := `level=WARN msg="Redis unreachable" cause=timeout err="redis answered no call within its deadline for 4s: context deadline exceeded"`
	if !strings.Contains(got, want) || strings.Count(got, "Redis unreachable") != 1 {
		t.Errorf("want one line %s, got:\n%s", want, got)
	}
	if want := `level=INFO msg="Redis answers again" down_for=10s failures=60`; !strings.Contains(got, want) {
		t.Errorf("the log lacks %s:\n%s", want, got)
	}
}

// TestWatchRedisSilenceEndsWithAnAnswer: an answer, an error reply among
// them, begins the silence again, and calls made before it count from it.
func TestWatchRedisSilenceEndsWithAnAnswer(t *testing.T) {
	c := &testClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var log testenv.Buffer
	h := silentWatch(c, &log)
	ctx := expired(t)
	answers := []error{nil, redis.Nil, replyErr("NOSCRIPT No matching script")}
	h.report(context.Background(), c.now(), nil)
	for i := range 30 {
		c.advance(silentPeriod - 100*time.Millisecond)
		h.report(ctx, c.now().Add(-2*silentPeriod), ctx.Err()) // made long before the answer
		h.report(context.Background(), c.now(), answers[i%len(answers)])
	}
	if got := log.String(); got != "" {
		t.Fatalf("calls silent for less than %s since an answer were logged:\n%s", silentPeriod, got)
	}
}

// TestWatchRedisBusyPoolIsNoOutage: after a burst, calls waiting for a
// busy pool's connections end at their deadline while the calls holding
// them are answered, for a minute; cancelled calls say nothing either.
func TestWatchRedisBusyPoolIsNoOutage(t *testing.T) {
	c := &testClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var log testenv.Buffer
	h := silentWatch(c, &log)
	ctx := expired(t)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 600 {
		c.advance(100 * time.Millisecond)
		h.report(ctx, c.now().Add(-2*time.Second), ctx.Err())
		h.report(cancelled, c.now().Add(-2*time.Second), cancelled.Err())
		if i%30 == 0 {
			h.report(context.Background(), c.now().Add(-time.Second), nil)
		}
	}
	for range 600 { // only cancelled calls
		c.advance(100 * time.Millisecond)
		h.report(cancelled, c.now().Add(-2*time.Second), cancelled.Err())
	}
	if got := log.String(); got != "" {
		t.Fatalf("a busy pool was logged as an outage:\n%s", got)
	}
}

// TestWatchRedisReportsAHungRedis: a redis-server stopped with SIGSTOP
// accepts connections and answers nothing, so every call of the worker's
// client ends at its own deadline, as a call waiting for a busy pool does.
// The watch logs Redis unreachable within a few seconds, the outage dated
// from the stop, and answering again after SIGCONT.
func TestWatchRedisReportsAHungRedis(t *testing.T) {
	r := testenv.StartRedis(t)
	const timeout = 500 * time.Millisecond
	cfg := &config.Config{RedisURL: r.URL(), RedisMode: config.RedisSingle, RedisTimeout: timeout, Concurrency: 16}
	c, err := NewRedis(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	pid := r.Pid()
	// Cleanups run last first: the server goes on before its own cleanup
	// kills it, should the test end while it is stopped.
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	var log testenv.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	rep := WatchRedis(ctx, c, r.URL(), slog.New(slog.NewTextHandler(&log, nil)))
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	// Four callers, as a worker's, each call bounded by the timeout.
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				cctx, ccancel := context.WithTimeout(ctx, timeout)
				_ = c.Ping(cctx).Err()
				ccancel()
				time.Sleep(10 * time.Millisecond)
			}
		})
	}

	stopped := time.Now()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, silentPeriod+3*time.Second, "Redis unreachable logged", func() bool {
		return strings.Contains(log.String(), `msg="Redis unreachable"`)
	})
	t.Logf("logged unreachable %s after the stop", time.Since(stopped).Round(time.Millisecond))
	if down, since := rep.Down(); !down || since.Before(stopped.Add(-timeout)) || since.After(stopped.Add(time.Second)) {
		t.Errorf("Down() = %v, %v; want true since about the stop at %v", down, since, stopped)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	testenv.Eventually(t, 10*time.Second, "Redis answers again logged", func() bool {
		return strings.Contains(log.String(), `msg="Redis answers again"`)
	})
	cancel()
	wg.Wait()

	got := log.String()
	m := regexp.MustCompile(`msg="Redis answers again" .*down_for=(\S+)`).FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("no down_for:\n%s", got)
	}
	downFor, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatalf("down_for %q: %v", m[1], err)
	}
	if hung := resumed.Sub(stopped); downFor < hung-timeout || downFor > time.Since(stopped) {
		t.Errorf("down_for=%s, want about the %s Redis was stopped", downFor, hung)
	}
	for _, want := range []string{`msg="Redis unreachable"`, `msg="Redis answers again"`} {
		if n := strings.Count(got, want); n != 1 {
			t.Errorf("the log has %s %d times, want once:\n%s", want, n, got)
		}
	}
}

// TestWatchRedisIdleIsNoSilence: a call that missed its deadline, then
// nothing asked of Redis for minutes, then another that missed its own,
// is no outage: Redis was asked nothing in between.
func TestWatchRedisIdleIsNoSilence(t *testing.T) {
	c := &testClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var log testenv.Buffer
	h := silentWatch(c, &log)
	ctx := expired(t)
	for range 3 {
		c.advance(10 * time.Minute)
		h.report(ctx, c.now().Add(-2*time.Second), ctx.Err())
	}
	if got := log.String(); got != "" {
		t.Fatalf("calls minutes apart were logged as an outage:\n%s", got)
	}
	// Calls that keep missing their deadlines still are one.
	for range 4 {
		c.advance(2 * time.Second)
		h.report(ctx, c.now().Add(-2*time.Second), ctx.Err())
	}
	if got := log.String(); !strings.Contains(got, "Redis unreachable") {
		t.Fatalf("calls missing their deadlines for 8 s were not logged:\n%s", got)
	}
}

// netTimeout is a read that timed out on the connection's own deadline.
type netTimeout struct{}

func (netTimeout) Error() string   { return "read tcp 127.0.0.1:1->127.0.0.1:2: i/o timeout" }
func (netTimeout) Timeout() bool   { return true }
func (netTimeout) Temporary() bool { return true }

// TestWatchRedisShortStallIsNoOutage: with a timeout as short as the
// connection's read timeout, calls end on the read's own deadline (a net
// timeout) rather than the caller's: a stall shorter than silentPeriod is
// no outage, a longer one is logged once, dated from its first call.
func TestWatchRedisShortStallIsNoOutage(t *testing.T) {
	c := &testClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var log testenv.Buffer
	h := silentWatch(c, &log)
	live := context.Background() // the read's deadline came first
	stall := func(d time.Duration) (began time.Time) {
		began = c.now()
		for end := began.Add(d); c.now().Before(end); c.advance(100 * time.Millisecond) {
			h.report(live, c.now().Add(-200*time.Millisecond), netTimeout{})
		}
		h.report(live, c.now(), nil)
		c.advance(time.Minute)
		return began
	}
	stall(3500 * time.Millisecond)
	if got := log.String(); got != "" {
		t.Fatalf("a stall of 3.5 s was logged:\n%s", got)
	}
	stall(12 * time.Second)
	got := log.String()
	if strings.Count(got, "Redis unreachable") != 1 || !strings.Contains(got, "cause=timeout") || !strings.Contains(got, "down_for=12") {
		t.Fatalf("a stall of 12 s: want one unreachable line (cause timeout) and down_for about 12 s, got:\n%s", got)
	}
}

package consumer

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

// TestRedisOutageLoggedOnceThenEvery30s: while Redis fails, the worker
// says what it does with the jobs once, then once per 30 s of its clock
// with the jobs since; an outage after Redis answered is said at once.
// The clock is the test's, so nothing sleeps through the 30 s.
func TestRedisOutageLoggedOnceThenEvery30s(t *testing.T) {
	e := setup(t)
	var log testenv.Buffer
	e.params.Config.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	e.params.Config.Now = func() time.Time { return time.Unix(0, now.Load()) }
	advance := func(d time.Duration) { now.Add(int64(d)) }
	var down atomic.Bool
	down.Store(true)
	e.decider.decide = func(context.Context, throttle.Copy) throttle.Result {
		if down.Load() {
			return redisFailure(errors.New("connection refused"))
		}
		return result(throttle.Admitted, 0)
	}
	e.start()
	deliver := func(seq uint64) {
		m := newMsg(seq, "jobs.acme")
		e.push(m)
		e.waitSettled(m)
	}
	deliver(1) // logged: the outage begins
	advance(10 * time.Second)
	deliver(2)
	advance(10 * time.Second)
	deliver(3)
	advance(10 * time.Second)
	deliver(4) // 30 s after the first line: the summary, 3 jobs since
	down.Store(false)
	deliver(5)
	down.Store(true)
	deliver(6) // a new outage: logged at once
	e.stop()

	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		if strings.Contains(l, "redis failed") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 3 {
		t.Fatalf("%d lines about Redis failing, want 3 (the first, the 30 s summary, the next outage):\n%s", len(lines), log.String())
	}
	for i, want := range []string{"jobs=1 ", "jobs=3 ", "jobs=1 "} {
		if !strings.Contains(lines[i], want) || !strings.Contains(lines[i], "THROTTLER_ON_REDIS_ERROR=defer") {
			t.Errorf("line %d lacks %q and the policy: %s", i, want, lines[i])
		}
	}
}

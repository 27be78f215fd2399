package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

// burstBatch returns perTenant requests for each of tenants tenants at t,
// tenant by tenant, with job ids, and the decisions a limit of 10/s with a
// burst of 5 and a horizon of at least 500ms gives them on fresh buckets:
// five admitted, then slots 100ms apart.
func burstBatch(name string, tenants, perTenant int, at time.Time) ([]throttle.Request, []throttle.Decision) {
	var reqs []throttle.Request
	var want []throttle.Decision
	for ten := range tenants {
		for k := range perTenant {
			reqs = append(reqs, throttle.Request{Tenant: fmt.Sprintf("%s-%d", name, ten), JobID: "j" + strconv.Itoa(k), At: at})
			if k < 5 {
				want = append(want, admitted(int64(4-k)))
			} else {
				want = append(want, reserved(time.Duration(k-4)*100*ms))
			}
		}
	}
	return reqs, want
}

// checkBatch fails t unless every result has no error and its decision.
func checkBatch(t *testing.T, what string, reqs []throttle.Request, got []throttle.Result, want []throttle.Decision) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d results, want %d", what, len(got), len(want))
	}
	for i, r := range got {
		if r.Err != nil {
			t.Fatalf("%s: request %d (%s/%s): %v", what, i, reqs[i].Tenant, reqs[i].JobID, r.Err)
		}
		sameDecision(t, fmt.Sprintf("%s: request %d (%s/%s)", what, i, reqs[i].Tenant, reqs[i].JobID), r.Decision, want[i])
	}
}

// commandCalls returns the calls counted for cmd (e.g. "fcall") by INFO
// commandstats.
func commandCalls(t *testing.T, rdb *redis.Client, cmd string) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls=")
		if ok {
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			if err != nil {
				t.Fatalf("INFO commandstats: %q: %v", line, err)
			}
			return n
		}
	}
	return 0
}

// TestFunctionFlush deletes the engine's functions from Redis (FUNCTION
// FLUSH) between single calls, between batches, right before a batch and
// while batches run: every call must still succeed with the right decision,
// neither lost nor doubled (a call that finds the function missing did not
// run: the library is loaded again and the call sent again).
func TestFunctionFlush(t *testing.T) {
	e := setup(t)
	l := newLimiter(t, e.rdb, e.prefix, time.Second, throttle.Limits{throttle.PerSecond(10, 5)})
	ctx := context.Background()
	if err := l.Load(ctx); err != nil {
		t.Fatalf("Load: %v", err)
	}
	flush := func() {
		t.Helper()
		if err := e.rdb.FunctionFlush(ctx).Err(); err != nil {
			t.Fatalf("FUNCTION FLUSH: %v", err)
		}
	}
	loads := func() int { return commandCalls(t, e.rdb, "function|load") }

	t.Run("single calls", func(t *testing.T) {
		reqs, want := burstBatch("single", 1, 9, t0)
		for i, req := range reqs {
			flush()
			sameDecision(t, fmt.Sprintf("call %d after FUNCTION FLUSH", i), decide(t, l, req), want[i])
		}
	})

	t.Run("between batches", func(t *testing.T) {
		for b := range 4 {
			flush()
			loadsBefore := loads()
			reqs, want := burstBatch(fmt.Sprintf("between-%d", b), 6, 10, t0)
			checkBatch(t, fmt.Sprintf("batch %d after FUNCTION FLUSH", b), reqs, l.DecideBatch(ctx, reqs), want)
			// The batch met the missing function and loaded it once.
			if n := loads() - loadsBefore; n != 1 {
				t.Fatalf("batch %d after FUNCTION FLUSH: %d FUNCTION LOADs, want 1", b, n)
			}
			// The library is loaded again: the next batch loads nothing.
			reqs, want = burstBatch(fmt.Sprintf("between-%d-loaded", b), 6, 10, t0)
			checkBatch(t, fmt.Sprintf("batch %d, library loaded", b), reqs, l.DecideBatch(ctx, reqs), want)
			if n := loads() - loadsBefore; n != 1 {
				t.Fatalf("batch %d with the library loaded: %d more FUNCTION LOADs, want 0", b, n-1)
			}
		}
	})

	t.Run("while batches run", func(t *testing.T) {
		// Another client deletes the functions every few milliseconds
		// while batches of 60 run, so they may vanish between any two
		// commands of a pipeline.
		flusher := redis.NewClient(&redis.Options{Addr: e.srv.Addr})
		defer flusher.Close()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var flushes int
		var flushErr error
		wg.Go(func() {
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if err := flusher.FunctionFlush(ctx).Err(); err != nil {
					flushErr = err
					return
				}
				flushes++
			}
		})
		loadsBefore := loads()
		for b := range 60 {
			reqs, want := burstBatch(fmt.Sprintf("during-%d", b), 6, 10, t0)
			got := l.DecideBatch(ctx, reqs)
			if b == 59 {
				close(stop)
				wg.Wait()
			}
			checkBatch(t, fmt.Sprintf("batch %d with concurrent FUNCTION FLUSH", b), reqs, got, want)
		}
		if flushErr != nil {
			t.Fatalf("FUNCTION FLUSH: %v", flushErr)
		}
		n := loads() - loadsBefore
		t.Logf("%d flushes during 60 batches; the library was loaded again %d times", flushes, n)
		if flushes == 0 || n == 0 {
			t.Fatalf("%d flushes and %d loads: the flushes did not interleave with the batches", flushes, n)
		}
	})
}

// TestRedisRestart stops Redis in the middle of a test: calls fail with
// ErrRedis while it is down, and once it is back (with empty data, so every
// bucket starts full again) decisions are correct again.
func TestRedisRestart(t *testing.T) {
	e := setup(t)
	// A client that fails fast while the server is down: no command
	// retries, one dial attempt.
	rdb := redis.NewClient(&redis.Options{Addr: e.srv.Addr, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	l := newLimiter(t, rdb, e.prefix, time.Second, throttle.Limits{throttle.PerSecond(10, 5)})
	ctx := context.Background()

	reqs, want := burstBatch("before", 1, 8, t0)
	checkBatch(t, "before the restart", reqs, l.DecideBatch(ctx, reqs), want)

	e.srv.Stop(t)
	checkDown := func(what string, err error) {
		t.Helper()
		var rerr *throttle.RedisError
		if !errors.Is(err, throttle.ErrRedis) || errors.Is(err, throttle.ErrInvalid) || !errors.As(err, &rerr) {
			t.Fatalf("%s while Redis is down: error %v, want a *RedisError matching ErrRedis only", what, err)
		}
	}
	_, err := l.Decide(ctx, throttle.Request{Tenant: "before-0", JobID: "down", At: t0})
	checkDown("Decide", err)
	for i, r := range l.DecideBatch(ctx, reqs[:3]) {
		checkDown(fmt.Sprintf("DecideBatch request %d", i), r.Err)
	}

	e.srv.Start(t)
	// Connections pooled before the stop may fail once more; poll with a
	// tenant of its own until a call succeeds.
	testenv.Eventually(t, 10*time.Second, "a decision after Redis came back", func() bool {
		_, err := l.Decide(ctx, throttle.Request{Tenant: "poll", At: t0})
		return err == nil
	})
	// The data is gone: the same jobs at the same time meet a full bucket.
	checkBatch(t, "after Stop and Start", reqs, l.DecideBatch(ctx, reqs), want)
	if n := len(keys(t, e.rdb, e.prefix)); n == 0 {
		t.Fatalf("no key written after Redis came back")
	}

	// A Restart between two calls, with no call while it is down.
	e.srv.Restart(t)
	testenv.Eventually(t, 10*time.Second, "a decision after the restart", func() bool {
		_, err := l.Decide(ctx, throttle.Request{Tenant: "poll", At: t0})
		return err == nil
	})
	for i, req := range reqs {
		sameDecision(t, fmt.Sprintf("call %d after Restart", i), decide(t, l, req), want[i])
	}
}

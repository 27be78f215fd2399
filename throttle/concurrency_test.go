package throttle_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

const (
	hammerGoroutines = 64
	hammerFor        = 2 * time.Second
	hammerRate       = 100
	hammerBurst      = 10
)

// hammer runs call from 64 goroutines until hammerFor has passed and
// returns the instants just before the first call and just after the last.
// call reports its first error through the returned error.
func hammer(call func(g, i int) error) (start, end time.Time, err error) {
	var (
		wg       sync.WaitGroup
		firstErr atomic.Pointer[error]
	)
	start = time.Now()
	stop := start.Add(hammerFor)
	for g := range hammerGoroutines {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop) && firstErr.Load() == nil; i++ {
				if err := call(g, i); err != nil {
					firstErr.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	end = time.Now()
	if p := firstErr.Load(); p != nil {
		err = *p
	}
	return start, end, err
}

// TestConcurrentAllow checks that 64 goroutines calling Allow on one tenant
// (Redis TIME clock) never get more than the bucket allows in total.
func TestConcurrentAllow(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := newLimiter(t, e.rdb, e.prefix, 0, throttle.Limits{throttle.PerSecond(hammerRate, hammerBurst)})
	ctx := context.Background()
	var admitted, calls atomic.Int64
	start, end, err := hammer(func(int, int) error {
		calls.Add(1)
		d, err := l.Allow(ctx, "acme")
		if d.Outcome == throttle.Admitted {
			admitted.Add(1)
		}
		return err
	})
	if err != nil {
		t.Fatalf("Allow: %v", err)
	}
	elapsed := end.Sub(start).Seconds()
	limit := hammerBurst + hammerRate*elapsed + 1
	t.Logf("%d of %d calls admitted in %.3fs; at most %.1f allowed", admitted.Load(), calls.Load(), elapsed, limit)
	if float64(admitted.Load()) > limit {
		t.Fatalf("%d admitted in %.3fs, want at most burst + rate × elapsed + 1 = %.1f", admitted.Load(), elapsed, limit)
	}
	// With 64 goroutines asking all the time, nearly every token is used;
	// half the rate is a floor no busy machine should break.
	if float64(admitted.Load()) < hammerRate*elapsed/2 {
		t.Fatalf("only %d admitted in %.3fs at %d/s", admitted.Load(), elapsed, hammerRate)
	}
}

// TestConcurrentReserve does the same with Reserve and job ids: the slots
// handed out (admitted now, or reserved for later) that fall within the
// run are no more than the bucket allows over it.
func TestConcurrentReserve(t *testing.T) {
	t.Parallel()
	e := setup(t)
	l := newLimiter(t, e.rdb, e.prefix, 500*ms, throttle.Limits{throttle.PerSecond(hammerRate, hammerBurst)})
	ctx := context.Background()

	// The decision time is Redis TIME, which lies between callStart and
	// callEnd, so the true slot is in [callStart+Wait, callEnd+Wait].
	type slot struct {
		lo      time.Time     // callStart + Wait: never after the true slot
		latency time.Duration // callEnd - callStart
	}
	var (
		mu    sync.Mutex
		slots []slot
		calls atomic.Int64
	)
	start, end, err := hammer(func(g, i int) error {
		calls.Add(1)
		callStart := time.Now()
		d, err := l.Reserve(ctx, "acme", fmt.Sprintf("g%d-%d", g, i), 1)
		latency := time.Since(callStart)
		if err == nil && (d.Outcome == throttle.Admitted || d.Outcome == throttle.Reserved) {
			mu.Lock()
			slots = append(slots, slot{lo: callStart.Add(d.Wait), latency: latency})
			mu.Unlock()
		}
		return err
	})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}

	// Count every slot that may lie within [start, end]: a superset of the
	// true ones, all of whose true slots lie within [start, end+maxLatency].
	// The bucket hands out at most burst + rate × span + 1 slots in a span.
	var inRun int
	var maxLatency time.Duration
	for _, s := range slots {
		if !s.lo.After(end) {
			inRun++
			maxLatency = max(maxLatency, s.latency)
		}
	}
	elapsed := end.Sub(start).Seconds()
	limit := hammerBurst + hammerRate*(elapsed+maxLatency.Seconds()) + 1
	t.Logf("%d calls, %d slots handed out, %d within the %.3fs run (call latency up to %s); at most %.1f allowed",
		calls.Load(), len(slots), inRun, elapsed, maxLatency, limit)
	if float64(inRun) > limit {
		t.Fatalf("%d slots within %.3fs (+%s latency), want at most burst + rate × elapsed + 1 = %.1f", inRun, elapsed, maxLatency, limit)
	}
	if float64(inRun) < hammerRate*elapsed/2 {
		t.Fatalf("only %d slots within %.3fs at %d/s", inRun, elapsed, hammerRate)
	}
}

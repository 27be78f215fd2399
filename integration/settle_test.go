package integration

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/internal/testenv"
)

// TestSettleCostDelaysNextJob: under 10/s:1, a job charged 1 whose
// handler reports a cost of 21 leaves its tenant 20 tokens in debt: its
// next job starts 2 s after the settle, not 100 ms; the settle is counted.
func TestSettleCostDelaysNextJob(t *testing.T) {
	if err := consumer.SettleCost(context.Background(), 5); !errors.Is(err, consumer.ErrNoCostReport) {
		t.Fatalf("SettleCost outside a worker: %v, want ErrNoCostReport", err)
	}
	e := setup(t)
	var mu sync.Mutex
	var starts []time.Time
	var settledAt time.Time
	handler := func(ctx context.Context, job consumer.Job) error {
		mu.Lock()
		defer mu.Unlock()
		starts = append(starts, time.Now())
		if string(job.Data) == "big" {
			if err := consumer.SettleCost(ctx, -1); err == nil {
				t.Errorf("SettleCost(-1): no error")
			}
			if err := consumer.SettleCost(ctx, 21); err != nil {
				t.Errorf("SettleCost: %v", err)
			}
			settledAt = time.Now()
		}
		return nil
	}
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "10/s:1"})
	e.ensureStream(cfg)
	w := e.startWorker(cfg, handler)
	e.publish("jobs.acme", nil, []byte("big"))
	w.waitCompleted(t, "acme", 1)
	testenv.Eventually(t, 10*time.Second, "the debt of 20 counted", func() bool {
		return w.stats()["acme"].SettledCharged == 20
	})
	e.publish("jobs.acme", nil, []byte("small"))
	w.waitCompleted(t, "acme", 2)
	mu.Lock()
	defer mu.Unlock()
	if len(starts) != 2 {
		t.Fatalf("%d starts, want 2", len(starts))
	}
	// 20 tokens owed at 10/s: 2 s, less what the bucket refilled between
	// the admission and the settle (the handler's run, a few ms).
	if gap := starts[1].Sub(settledAt); gap < 1900*time.Millisecond || gap > 5*time.Second {
		t.Fatalf("the next job started %s after the settle, want about 2s", gap)
	}
}

// TestHTTPHandlerThrottlerCost: with THROTTLER_HANDLER=http, an answer's
// Throttler-Cost is the job's cost: acme's job answered 11 leaves 10 in
// debt, and its next job waits for it; globex's answers carry a malformed
// value, ignored: its jobs succeed, none failed nor settled.
func TestHTTPHandlerThrottlerCost(t *testing.T) {
	e := setup(t)
	var mu sync.Mutex
	starts := map[string][]time.Time{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		tenant := r.Header.Get("Throttler-Tenant")
		starts[tenant] = append(starts[tenant], time.Now())
		if tenant == "acme" {
			w.Header().Set("Throttler-Cost", "11")
		} else {
			w.Header().Set("Throttler-Cost", "1.5")
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	cfg := e.config(map[string]string{
		"THROTTLER_DEFAULT_LIMIT": "10/s:1",
		"THROTTLER_HANDLER":       "http",
		"THROTTLER_HTTP_URL":      srv.URL + "/jobs/{tenant}",
	})
	e.ensureStream(cfg)
	w := e.startWorker(cfg, nil)
	e.publish("jobs.acme", nil, []byte("a"))
	w.waitCompleted(t, "acme", 1)
	testenv.Eventually(t, 10*time.Second, "acme's debt of 10 counted", func() bool {
		return w.stats()["acme"].SettledCharged == 10
	})
	e.publish("jobs.acme", nil, []byte("b"))
	e.publishJobs("JOBS", "jobs.globex", nil, 3)
	w.waitCompleted(t, "acme", 2)
	w.waitCompleted(t, "globex", 3)
	st := w.stats()
	if g := st["globex"]; g.Failed != 0 || g.DeadLettered != 0 || g.SettledCharged != 0 || g.SettledRefunded != 0 {
		t.Fatalf("globex with a malformed Throttler-Cost: %+v, want 3 completed, nothing failed nor settled", g)
	}
	mu.Lock()
	defer mu.Unlock()
	if gap := starts["acme"][1].Sub(starts["acme"][0]); gap < 900*time.Millisecond {
		t.Fatalf("acme's next job started %s after the first, want about 1s (10 owed at 10/s)", gap)
	}
}

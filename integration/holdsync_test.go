package integration

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/internal/testenv"
)

// TestWorkerStartedDuringAHoldLearnsIt: a worker that starts while a
// tenant is held (its downstream asked to wait) learns the hold from the
// workers already running, so it does not start the tenant's jobs whose
// slots were reserved before the hold: as after a rolling deploy or a
// restart.
func TestWorkerStartedDuringAHoldLearnsIt(t *testing.T) {
	e := setup(t)
	cfg := e.config(nil)
	var told atomic.Bool
	until := time.Now().Add(time.Minute)
	handler := func(_ context.Context, job consumer.Job) error {
		if job.Tenant == "acme" && told.CompareAndSwap(false, true) {
			return &consumer.RetryAfter{Until: until, Reason: "429 Too Many Requests"}
		}
		return nil
	}
	a := e.startWorker(cfg, handler)
	e.publish("jobs.acme", nil, []byte("x"))
	heldBy := func(w *worker) bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.w != nil && slices.Contains(w.w.HeldDownstream(time.Now()), "acme")
	}
	testenv.Eventually(t, 10*time.Second, "the first worker holding acme", func() bool { return heldBy(a) })

	b := e.startWorker(cfg, handler)
	testenv.Eventually(t, 10*time.Second, "the worker started during the hold holding acme", func() bool { return heldBy(b) })
}

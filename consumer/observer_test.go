package consumer

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// recordingObserver keeps every timing it receives.
type recordingObserver struct {
	mu                                     sync.Mutex
	decisions, queueWaits, handlers, waits []time.Duration
}

func (o *recordingObserver) add(to *[]time.Duration, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	*to = append(*to, d)
}

func (o *recordingObserver) ObserveDecision(d time.Duration)     { o.add(&o.decisions, d) }
func (o *recordingObserver) ObserveQueueWait(d time.Duration)    { o.add(&o.queueWaits, d) }
func (o *recordingObserver) ObserveHandler(d time.Duration)      { o.add(&o.handlers, d) }
func (o *recordingObserver) ObserveThrottleWait(d time.Duration) { o.add(&o.waits, d) }

// snapshot copies what was observed.
func (o *recordingObserver) snapshot() (decisions, queueWaits, handlers, waits []time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.decisions), slices.Clone(o.queueWaits), slices.Clone(o.handlers), slices.Clone(o.waits)
}

// TestObserverSeesEachStage: a batch's decision is timed once; an admitted
// job's queue wait and handler run are timed once each; a deferred job
// reports the wait the throttle gave it, and no handler timing.
func TestObserverSeesEachStage(t *testing.T) {
	e := setup(t)
	obs := &recordingObserver{}
	e.params.Observer = obs
	const wait = 3 * time.Second
	e.decider.decide = func(_ context.Context, c throttle.Copy) throttle.Result {
		if c.Tenant == "slow" {
			return result(throttle.Reserved, wait)
		}
		return result(throttle.Admitted, 0)
	}
	handlerRan := 20 * time.Millisecond
	e.params.Handler = func(_ context.Context, job Job) error {
		e.ran.add(job)
		time.Sleep(handlerRan) // the handler's work, which the observer times
		return nil
	}
	e.start()
	admitted, deferred := newMsg(1, "jobs.acme"), newMsg(2, "jobs.slow")
	e.push(admitted, deferred)
	e.waitSettled(admitted, deferred)
	e.stop()

	decisions, queueWaits, handlers, waits := obs.snapshot()
	if len(decisions) == 0 || len(decisions) > 2 {
		t.Errorf("%d decisions timed, want one per batch (1 or 2)", len(decisions))
	}
	if len(queueWaits) != 1 || queueWaits[0] < 0 {
		t.Errorf("queue waits %v, want one, not negative", queueWaits)
	}
	if len(handlers) != 1 || handlers[0] < handlerRan {
		t.Errorf("handler timings %v, want one of at least %s", handlers, handlerRan)
	}
	if !slices.Equal(waits, []time.Duration{wait}) {
		t.Errorf("throttle waits %v, want [%s]", waits, wait)
	}
}

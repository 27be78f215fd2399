package consumer

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/throttler/throttler/header"
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
// reports no handler timing and no throttle wait until it runs, when its
// throttle wait is its whole wait since publish, like its queue wait.
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
	if _, _, _, waits := obs.snapshot(); len(waits) != 0 {
		t.Errorf("throttle waits %v before the deferred job ran, want none", waits)
	}
	// The deferred job comes back (NAK'd, delivered again) and runs.
	back := newMsg(3, "jobs.back").redelivered()
	e.push(back)
	e.waitSettled(back)
	e.stop()

	decisions, queueWaits, handlers, waits := obs.snapshot()
	// One per batch: the first two jobs are pulled in one batch or two,
	// as they arrive, and the third in a batch of its own.
	if len(decisions) < 2 || len(decisions) > 3 {
		t.Errorf("%d decisions timed, want one per batch (2 or 3)", len(decisions))
	}
	if len(queueWaits) != 2 || queueWaits[0] < 0 {
		t.Errorf("queue waits %v, want two, not negative", queueWaits)
	}
	if len(handlers) != 2 || handlers[0] < handlerRan {
		t.Errorf("handler timings %v, want two of at least %s", handlers, handlerRan)
	}
	if len(waits) != 1 || waits[0] != queueWaits[1] && waits[0] != queueWaits[0] {
		t.Errorf("throttle waits %v, want one, the queue wait of the job that came back (%v)", waits, queueWaits)
	}
}

// TestPutOff: a job counts as put off (its wait recorded as a throttle
// wait) when it comes back delivered again, moved or woken, and not when
// it is a moved retry of a failed run or a first delivery.
func TestPutOff(t *testing.T) {
	h := func(k, v string) nats.Header { return nats.Header{k: []string{v}} }
	for _, tc := range []struct {
		name string
		job  Job
		want bool
	}{
		{"first delivery", Job{Delivered: 1, Header: nats.Header{}}, false},
		{"delivered again", Job{Delivered: 2, Header: nats.Header{}}, true},
		{"moved", Job{Delivered: 1, Deferrals: 1, Header: h(header.WaitReason, "limit 1/m")}, true},
		{"woken", Job{Delivered: 1, Header: h(header.Woken, "1")}, true},
		{"moved retry", Job{Delivered: 1, Deferrals: 1, Header: h(header.WaitReason, failedReasonPrefix+" 1 of 5 times")}, false},
	} {
		if got := putOff(tc.job); got != tc.want {
			t.Errorf("%s: putOff %v, want %v", tc.name, got, tc.want)
		}
	}
}

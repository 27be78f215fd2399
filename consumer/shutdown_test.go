package consumer

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

// TestShutdownHandsBackJobsWaitingForASlot: when Run's context is
// cancelled, admitted jobs still waiting for a handler slot are handed back
// (NAK) at once, while the running job goes on to finish and be acked.
func TestShutdownHandsBackJobsWaitingForASlot(t *testing.T) {
	e := setup(t)
	e.params.Config.Concurrency = 1
	started, running := newSignal(t)
	release, finish := newSignal(t)
	e.params.Handler = func(_ context.Context, job Job) error {
		e.ran.add(job)
		if job.ID == "JOBS:1" {
			running()
			<-release
		}
		return nil
	}
	e.start()
	first, waiting := newMsg(1, "jobs.acme"), []*fakeMsg{newMsg(2, "jobs.acme"), newMsg(3, "jobs.globex")}
	e.push(append([]*fakeMsg{first}, waiting...)...)
	await(t, started, "the first job's handler")
	// Decided, the other two are admitted and wait: for the slot, or for
	// dispatch, which is itself waiting for the slot.
	testenv.Eventually(t, waitFor, "every job decided", func() bool { return len(e.decider.asked()) == 3 })

	e.cancel()
	e.waitSettled(waiting...)
	if got := first.settled(); len(got) != 0 || !e.running() {
		t.Errorf("the running job was settled %v (Run still running: %v) before its handler returned", got, e.running())
	}
	finish()
	e.stop()

	wantSettled(t, first, ack)
	for _, m := range waiting {
		wantSettled(t, m, nak)
	}
	if got := e.ran.ids(); !slices.Equal(got, []string{"JOBS:1"}) {
		t.Errorf("handler ran %v, want only JOBS:1", got)
	}
}

// TestShutdownHandsBackUndecidedJobs: jobs pulled and not yet decided when
// Run's context is cancelled, and those whose decision the cancellation cut
// short, are handed back (NAK) without running; a cut decision is no Redis
// error.
func TestShutdownHandsBackUndecidedJobs(t *testing.T) {
	e := setup(t)
	deciding, reached := newSignal(t)
	e.decider.decide = func(ctx context.Context, c throttle.Copy) throttle.Result {
		if c.JobID == "JOBS:1" {
			reached()
			<-ctx.Done()
			return redisFailure(ctx.Err())
		}
		return result(throttle.Admitted, 0)
	}
	e.start()
	cut := newMsg(1, "jobs.acme")
	e.push(cut)
	await(t, deciding, "the first job's decision")
	pulled := []*fakeMsg{newMsg(2, "jobs.acme"), newMsg(3, "jobs.globex")}
	e.waitTaken(e.push(pulled...))
	e.stop()

	for _, m := range append(pulled, cut) {
		wantSettled(t, m, nak)
	}
	if got := e.ran.ids(); len(got) != 0 {
		t.Errorf("handler ran %v, want none", got)
	}
	if got := e.decider.asked(); len(got) != 1 {
		t.Errorf("decider asked about %+v, want only JOBS:1", got)
	}
	if s := e.stats("acme"); s.RedisErrors != 0 || s.RedisCalls != 1 {
		t.Errorf("stats %+v, want one decision asked for and no Redis error", s)
	}
}

// TestShutdownCancelsHandlersPastTimeoutAndHandsThemBack: a handler still
// running ShutdownTimeout after Run's context was cancelled has its own
// context cancelled, and its job is handed back (NAK) at once, without
// waiting for the handler to return; the job is not counted as a failure,
// and Run returns once the handler has.
func TestShutdownCancelsHandlersPastTimeoutAndHandsThemBack(t *testing.T) {
	e := setup(t)
	e.params.Config.ShutdownTimeout = 50 * time.Millisecond
	started, running := newSignal(t)
	handedBack, sawHandBack := newSignal(t)
	var cancelled atomic.Bool
	e.params.Handler = func(ctx context.Context, _ Job) error {
		running()
		<-ctx.Done()
		cancelled.Store(true)
		<-handedBack // a handler slow to stop
		return ctx.Err()
	}
	e.start()
	m := newMsg(1, "jobs.acme")
	e.push(m)
	await(t, started, "the handler")
	e.cancel()
	e.waitSettled(m)
	if !e.running() {
		t.Error("Run returned before the handler did")
	}
	testenv.Eventually(t, waitFor, "the handler's context cancelled", cancelled.Load)
	sawHandBack()
	e.stop()

	wantSettled(t, m, nak)
	if got := e.failures.called(); len(got) != 0 {
		t.Errorf("failure counter called %+v, want never: a cancelled job did not fail", got)
	}
	if s := e.stats("acme"); s.Failed != 0 || s.Completed != 0 {
		t.Errorf("stats %+v, want none failed or completed", s)
	}
}

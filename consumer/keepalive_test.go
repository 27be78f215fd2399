package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

// keepAliveEnv is a workerEnv whose worker signals InProgress every 10 ms
// and reads its time from clk, which stands far from the real time (in
// 2100), so that a keep-alive reading another clock is caught.
func keepAliveEnv(t *testing.T) (*workerEnv, *fakeClock) {
	t.Helper()
	e := setup(t)
	clk := &fakeClock{now: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)}
	e.params.Config.Now = clk.Now
	e.params.Config.InProgressEvery = 10 * time.Millisecond
	return e, clk
}

// TestKeepAliveSignalsARunningJob: a job whose handler has run for
// InProgressEvery, by the worker's clock, is signalled InProgress, so that
// JetStream does not redeliver it while it runs; it is acked when done.
func TestKeepAliveSignalsARunningJob(t *testing.T) {
	e, clk := keepAliveEnv(t)
	started, running := newSignal(t)
	release, finish := newSignal(t)
	e.params.Handler = func(context.Context, Job) error {
		running()
		<-release
		return nil
	}
	e.start()
	m := newMsg(1, "jobs.acme")
	e.push(m)
	await(t, started, "the handler")
	clk.advance(10 * time.Millisecond)
	testenv.Eventually(t, waitFor, "an InProgress for the running job", func() bool { return m.inProgresses() > 0 })
	finish()
	e.waitSettled(m)
	e.stop()

	wantSettled(t, m, ack)
}

// TestKeepAliveSignalsAnUndecidedJob: a job pulled and held undecided for
// InProgressEvery, by the worker's clock (Redis slow, say), is signalled
// InProgress too.
func TestKeepAliveSignalsAnUndecidedJob(t *testing.T) {
	e, clk := keepAliveEnv(t)
	deciding, reached := newSignal(t)
	release, decide := newSignal(t)
	e.decider.decide = func(context.Context, throttle.Copy) throttle.Result {
		reached()
		<-release
		return result(throttle.Admitted, 0)
	}
	e.start()
	m := newMsg(1, "jobs.acme")
	e.push(m)
	await(t, deciding, "the decision")
	clk.advance(10 * time.Millisecond)
	testenv.Eventually(t, waitFor, "an InProgress for the undecided job", func() bool { return m.inProgresses() > 0 })
	decide()
	e.waitSettled(m)
	e.stop()

	wantSettled(t, m, ack)
}

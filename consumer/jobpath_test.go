//go:build jobpath

package consumer

// A measurement, not part of the suite: scripts/job-path.sh runs each
// outcome's test twice with coverage counts, stopped once its job is
// decided and once it is settled, and lists the files whose code ran more
// often in the second: the files a job enters from its decision to its
// ack, deferral or dead letter. The worker's loops are not started, so
// nothing else runs meanwhile.

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// TestJobPath takes one job to the outcome JOB_PATH_OUTCOME names, as
// far as JOB_PATH_STAGE says: "decided" or "settled".
func TestJobPath(t *testing.T) {
	outcomes := map[string]struct {
		result throttle.Result
		want   settlement
	}{
		"ack":         {result(throttle.Admitted, 0), ack},
		"deferral":    {result(throttle.Limited, 30*time.Second), nakAfter(30*time.Second + time.Millisecond)},
		"dead-letter": {throttle.Result{Err: &throttle.InvalidError{Code: throttle.CodeCostOverBurst}}, settlement{kind: "term"}},
	}
	c, ok := outcomes[os.Getenv("JOB_PATH_OUTCOME")]
	stage := os.Getenv("JOB_PATH_STAGE")
	if !ok || (stage != "decided" && stage != "settled") {
		t.Fatalf("JOB_PATH_OUTCOME %q, JOB_PATH_STAGE %q: run scripts/job-path.sh", os.Getenv("JOB_PATH_OUTCOME"), stage)
	}
	e := setup(t)
	w, err := New(e.params)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m := newMsg(1, "jobs.acme")
	m.log = e.log
	r := w.decider.newReader(ctx)
	r.read(m)
	g := r.group()
	g.results = []throttle.Result{c.result}
	// As Run joins them, in both stages: dispatching, then the defer loop;
	// only the settled stage hands them the decided job.
	batches, deferDone := w.defers.startDeferring(ctx)
	decided, dispatchDone := w.lifecycle.startDispatching(ctx, ctx, batches)
	if stage == "settled" {
		decided <- g
	}
	close(decided)
	<-dispatchDone
	close(batches)
	<-deferDone
	if stage == "decided" {
		return
	}
	e.waitSettled(m)
	w.runs.handlers.Wait()
	wantSettled(t, m, c.want)
}

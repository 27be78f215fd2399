package consumer

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Lane lets the jobs of a tenant with nothing queued pass a backlog of
// other tenants' jobs (package fastlane builds one). A consumer delivers in
// stream order, so without one a job stored behind another tenant's flood
// waits until the worker has taken in (and deferred) the whole flood.
//
// The lane takes such a job out of the backlog: it decides it at once as
// its copy (the copy's incarnation is fastcopy.Incarnation of the original's
// sequence, so the decision records the copy as the job's owner), copies it
// to a consumer of its own, Copies, and deletes the original. The worker
// pulls Copies beside its jobs consumer and runs a copy the lane admitted
// (fastcopy.Header "admitted") on its first delivery without deciding it
// again.
type Lane interface {
	// Run takes jobs out of backlogs until ctx is cancelled; a take under
	// way runs to its end before Run returns.
	Run(ctx context.Context)
	// Observe records that the jobs consumer delivered the message stored
	// at stream sequence seq, with pending jobs left to deliver after it.
	Observe(seq, pending uint64)
	// Pause is how long the deciding loop waits after a group of which
	// deferred of decided jobs were put off, so that putting a flood off
	// leaves the lane's jobs the CPU they need.
	Pause(deferred, decided int) time.Duration
	// Copies is the consumer delivering the lane's copies.
	Copies() jetstream.Consumer
}

// ClaimSettler settles an original delivered after a lane claimed its job
// for a copy (a Duplicate whose owner is a fast copy): acked once the copy is
// stored, handed back until then, and run when the lane that claimed it
// stopped before making the copy. Package fastlane builds one.
type ClaimSettler interface {
	SettleClaimed(ctx context.Context, msg jetstream.Msg, job Job)
}

// startLane runs the worker's lane, if it has one, until ctx is
// cancelled; stop returns once it has ended.
func (w *Worker) startLane(ctx context.Context) (stop func()) {
	if w.lane == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.lane.Run(ctx)
	}()
	return func() { <-done }
}

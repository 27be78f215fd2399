package consumer

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/fastlane/fastcopy"
	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/throttle"
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

// laneView is what the deciding loop tells the fast lane of each group it
// reads (observe) and asks it after deciding one (pause). A worker
// without a lane has noLane, so the loop never asks whether it has one.
type laneView interface {
	// observe tells the lane of the jobs consumer's furthest delivery
	// among items.
	observe(items []item)
	// pause is how long the loop waits after group g (Lane.Pause).
	pause(g decidedGroup) time.Duration
}

// viewOf is the deciding loop's view of lane, which may be nil.
func viewOf(lane Lane) laneView {
	if lane == nil {
		return noLane{}
	}
	return laneSight{lane}
}

// noLane is the view of a worker without a fast lane: nothing to tell,
// no pause.
type noLane struct{}

func (noLane) observe([]item) {}

func (noLane) pause(decidedGroup) time.Duration { return 0 }

// laneSight is the view of a worker's fast lane.
type laneSight struct{ lane Lane }

// observe tells the lane the stream sequence of the furthest original the
// jobs consumer delivered in items (not a lane's copy, nor a woken job's,
// which come from consumers of their own), and the jobs pending after it.
func (v laneSight) observe(items []item) {
	var last jetstream.Msg
	var lastSeq uint64
	for i := range items {
		it := &items[i]
		h := it.msg.Headers()
		if it.job.Sequence > lastSeq && h.Get(fastcopy.Header) == "" && h.Get(header.Woken) == "" {
			last, lastSeq = it.msg, it.job.Sequence
		}
	}
	if last == nil {
		return
	}
	if meta, err := last.Metadata(); err == nil {
		v.lane.Observe(lastSeq, meta.NumPending)
	}
}

func (v laneSight) pause(g decidedGroup) time.Duration {
	deferred, decided := g.deferred()
	return v.lane.Pause(deferred, decided)
}

// ClaimSettler settles an original delivered after a lane claimed its job
// for a copy (a Duplicate whose owner is a fast copy): acked once the copy is
// stored, handed back until then, and run when the lane that claimed it
// stopped before making the copy. Package fastlane builds one.
type ClaimSettler interface {
	SettleClaimed(ctx context.Context, msg jetstream.Msg, job Job)
}

// laneAdapter joins the worker to its fast lane, if it has one: it runs
// the lane and its ack-pending count, starts the copies the lane admitted,
// and settles the originals whose jobs the lane claimed.
type laneAdapter struct {
	lane       Lane         // nil without a fast lane
	claims     ClaimSettler // nil without one
	ackPending *AckPending  // nil without one

	handlers *sync.WaitGroup // the worker's, waited for before it stops
	hand     *inHand
	// start is the worker's: start an admitted job's handler.
	start func(ctx, work context.Context, f *flight, job Job)
	rec   *recorder
	cfg   Config
	log   *slog.Logger
}

// startLane runs the worker's lane until ctx is cancelled; stop returns
// once it has ended. A worker has it when it has a lane.
func (l *laneAdapter) startLane(ctx, _ context.Context) (stop func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.lane.Run(ctx)
	}()
	return func() { <-done }
}

// startPreAdmitted starts the fast copy in msg if the lane admitted it when it
// claimed it (and charged it then) and this is its first delivery: it runs
// without being decided again. It reports whether it did; any other
// message is decided as usual.
func (l *laneAdapter) startPreAdmitted(ctx, work context.Context, msg jetstream.Msg) bool {
	if msg.Headers().Get(fastcopy.Header) != fastcopy.Admitted {
		return false
	}
	job, err := readJob(msg, l.cfg)
	if err != nil || job.Delivered != 1 {
		return false
	}
	l.rec.add(job.Tenant, func(s *TenantStats) { s.Delivered++ })
	f := &flight{msg: msg, started: l.cfg.Now(), log: l.log}
	l.hand.flights.Store(f, struct{}{})
	l.start(ctx, work, f, job)
	return true
}

// claimRecheck is how long an original whose job a lane claimed waits
// before it is decided again, when the worker has no ClaimSettler.
const claimRecheck = time.Second

// take settles an original whose job the lane claimed for its copy
// (throttle.Duplicate, owned by a fast copy): the lane runs the job.
func (l *laneAdapter) take(g *groupActs, it *item, _ throttle.Result) bool {
	l.settleClaimed(g.work, it.msg, it.job)
	return true
}

// settleClaimed settles an original whose job a lane claimed for its copy
// with the ClaimSettler, in its own goroutine (it asks the stream whether
// the copy is stored). Without one, it hands the job back to be decided
// again, until the claim expires.
func (l *laneAdapter) settleClaimed(work context.Context, msg jetstream.Msg, job Job) {
	if l.claims == nil {
		settleOrLog(l.log, msg, func(m jetstream.Msg) error { return m.NakWithDelay(claimRecheck) })
		return
	}
	l.handlers.Add(1)
	go func() {
		defer l.handlers.Done()
		l.claims.SettleClaimed(work, msg, job)
	}()
}

package consumer

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/throttle"
)

// deferBatch is one group's deferrals, handed to the defer loop, and the
// fetch credits the group holds until they are settled.
type deferBatch struct {
	deferrals []Deferral
	credits   int
	// unreserve are the slots of paused jobs to give up before they are
	// deferred (see Unreserver).
	unreserve []throttle.Slot
}

// deferSettler settles deferrals with the Deferrer: the limited jobs of
// each decided group, in its defer loop, and the jobs put off after they
// were admitted or ran (a downstream hold, a pause, a retry). It counts and
// logs every deferral's outcome, and unpacks the moved jobs' bundles when
// they fire.
type deferSettler struct {
	deferrer Deferrer
	pull     *puller // gets back the credits of each batch deferred
	pauses   *pauseGate
	// unbundle unpacks the bundles of moved jobs when they fire: the
	// other half of a move (unbundle.go).
	unbundle *unbundler
	rec      *recorder
	cfg      Config
	log      *slog.Logger
}

// take defers a job the throttle told to wait (throttle.Limited or
// Reserved, not kept in the worker) until its slot: the defer loop
// settles it after its group.
func (s *deferSettler) take(g *groupActs, it *item, res throttle.Result) bool {
	s.rec.add(it.job.Tenant, func(st *TenantStats) { st.Deferred++ })
	g.deferrals = append(g.deferrals, Deferral{Msg: it.msg, Job: it.job, Wait: res.Wait, Reason: waitReason(res.Decision)})
	return true
}

// waitReason says what held a limited job, for header.WaitReason.
func waitReason(d throttle.Decision) string {
	if d.LevelName != "" {
		return "shared limit " + d.LevelName
	}
	if d.Binding == (throttle.Limit{}) {
		return header.WaitSlot
	}
	return header.WaitLimit + d.Binding.String()
}

// startDeferring settles the deferrals of each batch sent on batches, in
// order, until batches is closed; done is closed after the last.
func (s *deferSettler) startDeferring(work context.Context) (batches chan<- deferBatch, done <-chan struct{}) {
	// Deferring runs in a goroutine of its own, one batch after the other,
	// so moving one group's jobs overlaps with deciding the next while the
	// copies are still stored in slot order.
	in := make(chan deferBatch, 4)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		s.deferLoop(work, in)
	}()
	return in, finished
}

// deferLoop settles each batch's deferrals with the Deferrer, in order, then
// frees the batch's credits.
func (s *deferSettler) deferLoop(ctx context.Context, batches <-chan deferBatch) {
	for b := range batches {
		// Take every batch already waiting too: one Defer call for all of
		// them keeps more copies in flight per round trip.
		credits, ds, slots := b.credits, b.deferrals, b.unreserve
	more:
		for {
			select {
			case nb, ok := <-batches:
				if !ok {
					break more
				}
				credits += nb.credits
				ds = append(ds, nb.deferrals...)
				slots = append(slots, nb.unreserve...)
			default:
				break more
			}
		}
		// Off the dispatching path: a paused tenant's jobs cost the others
		// no round trip. Before the move, so a copy never comes back to a
		// slot it should have given up.
		if len(slots) > 0 {
			s.pauses.unreserve(ctx, slots)
		}
		if len(ds) > 0 {
			s.deferrer.Defer(ctx, ds)
		}
		for _, d := range ds {
			s.deferred(d)
		}
		s.pull.releaseCredits(credits)
	}
}

// deferred counts and logs the outcome of a deferral: one line for a job
// NAK'd instead of moved, saying why, and one for a job left unsettled.
func (s *deferSettler) deferred(d Deferral) {
	tenant, id := d.Job.Tenant, d.Job.ID
	s.rec.deferred(d)
	switch {
	case d.Moved:
		s.rec.add(tenant, func(s *TenantStats) { s.Moved++ })
	case d.NakedInstead != nil && header.TooLarge(d.NakedInstead):
		s.rec.add(tenant, func(s *TenantStats) { s.MovesTooLarge++ })
		s.log.Info("job too large to move off the consumer; deferred with NAK", "tenant", tenant, "job", id, "wait", d.Wait, "why", d.NakedInstead)
	case d.NakedInstead != nil:
		s.log.Warn("moving a job failed; deferred with NAK instead", "tenant", tenant, "job", id, "wait", d.Wait, "err", d.NakedInstead)
	}
	if d.Err != nil {
		s.log.Warn("deferring a job failed; JetStream redelivers it after AckWait", "tenant", tenant, "job", id, "err", d.Err)
	}
}

// deferFlight defers the job of flight f, admitted and not run, as d
// says, unless f was settled already (the shutdown handed it back).
// Unless released (its owner record is known not to name this
// incarnation), it is NAK'd for d.Wait instead: a moved copy would be
// taken for a duplicate.
func (s *deferSettler) deferFlight(ctx context.Context, f *flight, d Deferral, released bool) {
	if !released {
		f.settle(func(m jetstream.Msg) error { return m.NakWithDelay(d.Wait) })
		return
	}
	if !f.settled.CompareAndSwap(false, true) {
		return
	}
	d.Msg = f.msg
	ds := []Deferral{d}
	s.deferrer.Defer(ctx, ds)
	s.deferred(ds[0])
}

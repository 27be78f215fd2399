package consumer

import (
	"context"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/throttle"
)

// PauseReason starts the wait reason (HeaderWaitReason) of every job
// waiting because its tenant is paused, and no other: a resume finds the
// paused jobs' copies by it.
const PauseReason = "paused"

// Pauser says whether an operator paused a tenant; *pause.Set satisfies
// it. The worker asks it for every job it is about to decide and again
// just before it starts one, so it must be cheap and safe for concurrent
// use.
type Pauser interface {
	// Paused reports whether tenant is paused at now, why, and until when
	// (zero: until resumed).
	Paused(tenant string, now time.Time) (reason string, until time.Time, paused bool)
}

// Unreserver gives up the slots jobs hold, so that each is decided anew
// when it comes back; *throttle.Copies satisfies it. The worker calls it
// for a paused tenant's jobs: their slots would all come due during the
// pause and run at once on resume, on top of the burst the tenant's
// buckets filled to meanwhile.
type Unreserver interface {
	Unreserve(ctx context.Context, slots []throttle.Slot) error
}

// mayHoldSlot reports whether job may hold a slot reserved for it, which
// a pause must give up: it was decided before (not a fresh original) and
// is not back from a pause (that one gave its slot up already).
func mayHoldSlot(job Job) bool {
	fresh := job.Delivered == 1 && job.Header.Get(HeaderJobID) == ""
	return !fresh && !strings.HasPrefix(job.Header.Get(HeaderWaitReason), PauseReason)
}

// pausedSlots are the slots of a group's paused jobs that may hold one.
func pausedSlots(items []item) []throttle.Slot {
	var slots []throttle.Slot
	for i := range items {
		if it := &items[i]; it.paused != nil && mayHoldSlot(it.job) {
			slots = append(slots, throttle.Slot{Tenant: it.job.Tenant, JobID: it.job.ID})
		}
	}
	return slots
}

// unreserve gives up slots in one round trip. A failure is logged: those
// jobs keep their slots, and may run on them at once on resume.
func (w *Worker) unreserve(ctx context.Context, slots []throttle.Slot) {
	if w.unreserver == nil || len(slots) == 0 {
		return
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.RedisTimeout)
	defer cancel()
	if err := w.unreserver.Unreserve(uctx, slots); err != nil {
		w.log.Warn("giving up paused jobs' slots failed; they may run on them at once on resume", "jobs", len(slots), "err", err)
	}
}

// pausedNow reports whether job's tenant is paused now, and the wait of
// its copy until it is checked again.
func (w *Worker) pausedNow(tenant string) (Deferral, bool) {
	if w.pauses == nil {
		return Deferral{}, false
	}
	now := w.cfg.Now()
	reason, until, paused := w.pauses.Paused(tenant, now)
	if !paused {
		return Deferral{}, false
	}
	// A paused job comes back by itself after PauseRecheck, or when the
	// pause ends if sooner; a resume brings it back at once (pause.Resume).
	wait := w.cfg.PauseRecheck
	text := PauseReason
	if !until.IsZero() {
		wait = min(wait, until.Sub(now))
		text += " until " + until.UTC().Format(time.RFC3339)
	}
	if reason != "" {
		text += ": " + reason
	}
	return Deferral{Wait: max(0, wait), Reason: text, Park: true, Paused: true}, true
}

// pausedDeferral is the deferral of a pulled job whose tenant is paused,
// decided without asking the throttle: it is not charged, and waits off
// the consumer as a parked copy of its own.
func (w *Worker) pausedDeferral(it *item, d Deferral) Deferral {
	w.stats.Add(it.job.Tenant, func(s *TenantStats) { s.Paused++ })
	d.Msg, d.Job = it.msg, it.job
	return d
}

// waitOutPause settles an admitted job whose tenant was paused since it
// was decided, instead of starting it: it waits as a paused job does. Its
// admission's charge is spent (as for a hold): back, it is decided again.
func (w *Worker) waitOutPause(ctx context.Context, f *flight, job Job, d Deferral) {
	w.stats.Add(job.Tenant, func(s *TenantStats) { s.Paused++ })
	if !w.holds.release(ctx, job) {
		// The owner record may still name this incarnation, and a moved
		// copy would then be taken for a duplicate: NAK.
		f.settle(func(m jetstream.Msg) error { return m.NakWithDelay(d.Wait) })
		return
	}
	if f.settled.CompareAndSwap(false, true) {
		d.Msg, d.Job = f.msg, job
		ds := []Deferral{d}
		w.deferrer.Defer(ctx, ds)
		w.deferred(ds[0])
	}
}

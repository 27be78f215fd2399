package consumer

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/throttle"
)

// pauseEndGrace is how long after a pause's end its jobs' copies come back
// by themselves: time for a worker to end it and bring them back in order
// first.
const pauseEndGrace = 2 * time.Second

// Pauser says whether an operator paused a tenant; *pause.Set satisfies
// it. The worker asks it for every job it is about to decide and again
// just before it starts one, so it must be cheap and safe for concurrent
// use.
type Pauser interface {
	// Paused reports whether tenant is paused at now, why, and until when
	// (zero: until resumed).
	Paused(tenant string, now time.Time) (reason string, until time.Time, paused bool)
	// Since returns when the pause of tenant in force at now began, zero
	// when it is not paused. It is asked only of jobs a resume released
	// (header.Released).
	Since(tenant string, now time.Time) time.Time
}

// Unreserver gives up the slots jobs hold, so that each is decided anew
// when it comes back; *throttle.Decider satisfies it. The worker calls it
// for a paused tenant's jobs: their slots would all come due during the
// pause and run at once on resume, on top of the burst the tenant's
// buckets filled to meanwhile.
type Unreserver interface {
	Unreserve(ctx context.Context, slots []throttle.Slot) error
}

// mayHaveReservation reports whether job may have a reservation, which a
// pause must give up: it was decided before (not a fresh original) and is
// not back from a pause (that one gave its reservation up already).
func mayHaveReservation(job Job) bool {
	fresh := job.Delivered == 1 && job.Header.Get(header.JobID) == ""
	return !fresh && !strings.HasPrefix(job.Header.Get(header.WaitReason), header.WaitPaused)
}

// pausedSlot is the slot of a paused job, when it may hold one: decided
// before, or kept in the worker for its slot. A slot kept would let its
// job run at once on resume, ahead of the jobs paused before it.
func pausedSlot(it *item) (throttle.Slot, bool) {
	return throttle.Slot{Tenant: it.job.Tenant, JobID: it.job.ID, Group: it.job.Group, Cost: it.job.Cost}, it.shortWaited || mayHaveReservation(it.job)
}

// pauseGate asks the Pauser whether a tenant is paused and gives up the
// slots of a paused tenant's jobs. Without a Pauser or an Unreserver it
// has a no-op one: nothing is paused, no slot given up.
type pauseGate struct {
	pauser     Pauser
	unreserver Unreserver
	recheck    time.Duration // Config.PauseRecheck
	timeout    time.Duration // Config.RedisTimeout, for each Unreserve
	now        func() time.Time
	log        *slog.Logger
	// Set by New, for the jobs admitted before their tenant was paused:
	// the counts, the owner record given up (downstreamHolds.release), and
	// the deferral (deferSettler.deferFlight).
	rec         *recorder
	release     func(ctx context.Context, job Job) bool
	deferFlight func(ctx context.Context, f *flight, d Deferral, released bool)
}

// newPauseGate returns a pauseGate asking p and giving slots up to u,
// either of which may be nil.
func newPauseGate(p Pauser, u Unreserver, cfg Config) *pauseGate {
	if p == nil {
		p = nopPauser{}
	}
	if u == nil {
		u = nopUnreserver{}
	}
	return &pauseGate{pauser: p, unreserver: u, recheck: cfg.PauseRecheck,
		timeout: cfg.RedisTimeout, now: cfg.Now, log: cfg.Logger}
}

// nopPauser is the Pauser of a worker given none: nothing is paused.
type nopPauser struct{}

func (nopPauser) Paused(string, time.Time) (string, time.Time, bool) { return "", time.Time{}, false }

func (nopPauser) Since(string, time.Time) time.Time { return time.Time{} }

// nopUnreserver is the Unreserver of a worker given none: slots are kept.
type nopUnreserver struct{}

func (nopUnreserver) Unreserve(context.Context, []throttle.Slot) error { return nil }

// unreserve gives up slots in one round trip. A failure is logged: those
// jobs keep their slots, and may run on them at once on resume.
func (g *pauseGate) unreserve(ctx context.Context, slots []throttle.Slot) {
	if len(slots) == 0 {
		return
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.timeout)
	defer cancel()
	if err := g.unreserver.Unreserve(uctx, slots); err != nil {
		g.log.Warn("giving up paused jobs' slots failed; they may run on them at once on resume", "jobs", len(slots), "err", err)
	}
}

// pausedNow reports whether job's tenant is paused now for job, and the
// wait of its copy until it is checked again.
func (g *pauseGate) pausedNow(job Job) (Deferral, bool) {
	now := g.now()
	reason, until, paused := g.pauser.Paused(job.Tenant, now)
	if !paused || releasedFrom(job, g.pauser.Since(job.Tenant, now)) {
		return Deferral{}, false
	}
	// A paused job comes back by itself after PauseRecheck, or when the
	// pause ends if sooner; a resume brings it back at once (pause.Resume).
	wait := g.recheck
	text := header.WaitPaused
	if !until.IsZero() {
		// A worker ends the pause at until and brings its jobs back in
		// their order (pause.End); the copies come back by themselves
		// pauseEndGrace later, when no worker did, in no set order.
		wait = min(wait, until.Sub(now)+pauseEndGrace)
		text += " until " + until.UTC().Format(time.RFC3339)
	}
	if reason != "" {
		text += ": " + reason
	}
	return Deferral{Wait: max(0, wait), Reason: text, Park: true, Paused: true}, true
}

// releasedFrom reports whether a resume released job from the pause that
// began at since, or from a later one: it was brought back at or after
// since.
func releasedFrom(job Job, since time.Time) bool {
	v := job.Header.Get(header.Released)
	if v == "" {
		return false
	}
	at, err := time.Parse(time.RFC3339Nano, v)
	return err == nil && !at.Before(since)
}

// pausedAt is a question of whether a tenant is paused at now, or nil
// without a Pauser (throttler top then shows no tenant as paused).
func (g *pauseGate) pausedAt(now time.Time) func(string) bool {
	if _, none := g.pauser.(nopPauser); none {
		return nil
	}
	return func(t string) bool { _, _, p := g.pauser.Paused(t, now); return p }
}

// waitOut settles an admitted job whose tenant was paused since it
// was decided, instead of starting it: it waits as a paused job does. Its
// admission's charge is spent (as for a hold): back, it is decided again.
// So its slot is given up too: kept, it would let the job run at once on
// resume, ahead of the jobs paused before it.
func (g *pauseGate) waitOut(ctx context.Context, f *flight, job Job, d Deferral) {
	g.rec.add(job.Tenant, func(s *TenantStats) { s.Paused++ })
	g.unreserve(ctx, []throttle.Slot{{Tenant: job.Tenant, JobID: job.ID}})
	d.Job = job
	g.deferFlight(ctx, f, d, g.release(ctx, job))
}

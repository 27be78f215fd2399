package throttle

import (
	"context"
	"errors"
)

// Decider decides jobs that may exist as several messages, so that only
// one of them runs. A job may be moved off its queue (re-published as a
// copy to fire at its slot, the original acked); if the worker dies
// between the two, both the original and the copy exist, and a move redone
// after a long outage can even leave two copies. Each message is an
// incarnation of the job, named by a number unique to it
// (Copy.Incarnation).
//
// A Decider keeps an owner record per job (see Owners), read and written
// in the same atomic function call as the rate decision: an incarnation
// that is admitted records itself as the owner (all but a Fresh original
// admitted at once, which has no copy), and any other incarnation decided
// later is a Duplicate. An owner decided again and deferred (it did not
// run: its handler failed, say) gives ownership up, so that the copy its
// move makes may run. The record lives as long as a reservation: the
// horizon plus the tenant's longest fill time.
//
// A tenant whose policy caps its running jobs (Policy.Running), and every
// tenant under a fleet-wide cap (CapOptions.MaxRunning), is decided under
// its RunningCaps, which takes the leases.
//
// A Decider is safe for concurrent use by many goroutines.
type Decider struct {
	l      *Limiter
	caps   *RunningCaps
	shared *Shared // nil: no levels above the tenant
}

// NewDecider returns the Decider of l's jobs, deciding under caps. Nil
// caps means the RunningCaps of the default CapOptions: tenants' caps
// only, none over the fleet.
func NewDecider(l *Limiter, caps *RunningCaps) (*Decider, error) {
	if l == nil {
		return nil, errors.New("throttle: nil limiter")
	}
	if caps == nil {
		var err error
		if caps, err = NewRunningCaps(l, CapOptions{}); err != nil {
			return nil, err
		}
	}
	if caps.l != l {
		return nil, errors.New("throttle: running caps of another limiter")
	}
	return &Decider{l: l, caps: caps}, nil
}

// Decide decides one copy, as DecideBatch does.
func (d *Decider) Decide(ctx context.Context, cp Copy) (Decision, error) {
	r := d.DecideBatch(ctx, []Copy{cp})
	return r[0].Decision, r[0].Err
}

// DecideBatch decides many copies in one pipelined round trip, with the
// same outcome as deciding them one by one in the order given, grouped into
// function calls as Limiter.DecideBatch groups requests. The results match
// copies by index.
//
// A copy of a tenant whose policy caps its running jobs (Policy.Running)
// is decided by a call of its own that takes a lease in the same atomic
// call as the rate decision: Admitted holding Decision.Leases, which the
// caller renews while the job runs (RunningCaps.Renew) and gives back when
// it ends (RunningCaps.Finish); or Capped, queued for a lease. With
// CapOptions.MaxRunning, every copy first takes a lease of the fleet's
// cap, in one more round trip, and gives it back in a third when it is not
// admitted. Result.Wake names the waiting jobs whose turn a call made: the
// caller wakes them.
//
// A copy of a tenant whose policy draws on credits (Policy.Credits) is
// first charged its cost against the tenant's balance, in one more round
// trip before the others: one the balance does not cover is Unfunded; one
// charged that then does not run (Limited, Capped) gets its credits back
// in a last round trip. A job is charged once, however often it is
// decided and whichever incarnation comes back. A tenant with credits and
// no limits (and no cap) has its copies admitted once charged.
func (d *Decider) DecideBatch(ctx context.Context, copies []Copy) []Result {
	if d.shared != nil {
		return d.decideLevels(ctx, copies)
	}
	return d.decideTenants(ctx, copies)
}

// decideTenants is DecideBatch past the levels above the tenant.
func (d *Decider) decideTenants(ctx context.Context, copies []Copy) []Result {
	capped, credits := d.scan(copies)
	if credits {
		return d.decideWithCredits(ctx, copies, capped)
	}
	return d.decideRates(ctx, copies, capped)
}

// decideRates is DecideBatch past the credits stage; capped says some
// copy's tenant may have a running cap in force.
func (d *Decider) decideRates(ctx context.Context, copies []Copy, capped bool) []Result {
	if d.caps.o.MaxRunning == 0 && !capped {
		return d.l.decideBatch(ctx, len(copies), func(i int) (prepared, error) { return d.prepare(copies[i]) })
	}
	return d.decideCapped(ctx, copies)
}

package consumer

import (
	"fmt"
	"time"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/throttle"
)

// creditsGateRecheck bounds the wait of a job a top-up's gate holds back.
// The gate is set for throttle.CreditsGate (a minute) while the top-up
// runs, should its releaser die, and closed a second after the release:
// a job that came during the top-up would otherwise wait out the minute.
const creditsGateRecheck = time.Second

// unfunded is the stage of the jobs their tenant's credits refused
// (throttle.Unfunded).
type unfunded struct {
	rec     *recorder
	parkFor time.Duration // Config.ParkFor: the fallback of a parked job
}

// take holds a refused job back behind a top-up's released jobs,
// dead-letters it under credits:dlq (it.bad), or parks it until a top-up
// brings it back.
func (u unfunded) take(g *groupActs, it *item, res throttle.Result) bool {
	d := res.Decision
	switch {
	case d.Wait > 0:
		// A top-up is bringing the jobs that waited back, in order: this
		// one comes after them.
		u.rec.add(it.job.Tenant, func(s *TenantStats) { s.Deferred++ })
		g.deferrals = append(g.deferrals, Deferral{Msg: it.msg, Job: it.job, Wait: min(d.Wait, creditsGateRecheck),
			Reason: "credits: the jobs a top-up brought back go first"})
	case d.CreditsDeadLetter && !d.Untrusted:
		// An untrusted balance is Redis', not the tenant's: the job waits
		// for the operator like any other, rather than go to the dead
		// letters with every job of the tenant.
		it.bad = &badJobError{tenant: it.job.Tenant, reason: "credits: " + unfundedReason(it.job, d)}
	default:
		u.rec.add(it.job.Tenant, func(s *TenantStats) { s.CreditsWaiting++ })
		// Parked until a top-up brings it back; the fallback only bounds
		// the wait of a job a top-up missed (its release failed midway).
		g.deferrals = append(g.deferrals, Deferral{Msg: it.msg, Job: it.job, Wait: u.parkFor, Park: true,
			Reason: header.WaitCredits + ": " + unfundedReason(it.job, d)})
	}
	return true
}

// unfundedReason says why credits refused a job, for people.
func unfundedReason(job Job, d throttle.Decision) string {
	switch {
	case d.Untrusted:
		return fmt.Sprintf("the balance of %s is not trusted since Redis restarted or failed over; "+
			"see throttler credits history %s, then credits set", job.Tenant, job.Tenant)
	case job.Cost > d.Balance:
		return fmt.Sprintf("balance %d cannot cover cost %d", d.Balance, job.Cost)
	}
	return fmt.Sprintf("jobs before it wait for a top-up (balance %d)", d.Balance)
}

// releasedByTopUp reports whether a top-up brought job back lately, so
// that it goes before the new jobs the top-up holds back
// (throttle.CreditsGate). A copy released long ago and parked again is a
// new arrival for a later top-up.
func releasedByTopUp(job Job, now time.Time) bool {
	return releasedFrom(job, now.Add(-throttle.CreditsGate))
}

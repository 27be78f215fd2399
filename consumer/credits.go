package consumer

import (
	"fmt"
	"time"

	"github.com/throttler/throttler/throttle"
)

// CreditsReason starts the wait reason (HeaderWaitReason) of every job
// parked because its tenant's credits could not cover it, and no other: a
// top-up (throttler credits add or set) finds their copies by it and
// brings them back in order.
const CreditsReason = "waiting for credits"

// unfunded is the stage of a job its tenant's credits refused
// (throttle.Unfunded): held back behind a top-up's released jobs, dead
// -lettered under credits:dlq, or parked until a top-up brings it back.
// It returns the job's deferral, or false when the job is dead-lettered
// (it.bad is set).
func (l *lifecycle) unfunded(it *item, d throttle.Decision) (Deferral, bool) {
	switch {
	case d.Wait > 0:
		// A top-up is bringing the jobs that waited back, in order: this
		// one comes after them.
		l.rec.add(it.job.Tenant, func(s *TenantStats) { s.Deferred++ })
		return Deferral{Msg: it.msg, Job: it.job, Wait: d.Wait,
			Reason: "credits: the jobs a top-up brought back go first"}, true
	case d.CreditsDeadLetter && !d.Untrusted:
		// An untrusted balance is Redis', not the tenant's: the job waits
		// for the operator like any other, rather than go to the dead
		// letters with every job of the tenant.
		it.bad = &badJobError{tenant: it.job.Tenant, reason: "credits: " + unfundedReason(it.job, d)}
		return Deferral{}, false
	}
	l.rec.add(it.job.Tenant, func(s *TenantStats) { s.CreditsWaiting++ })
	// Parked until a top-up brings it back; the fallback only bounds the
	// wait of a job a top-up missed (its release failed midway).
	return Deferral{Msg: it.msg, Job: it.job, Wait: l.cfg.ParkFor, Park: true,
		Reason: CreditsReason + ": " + unfundedReason(it.job, d)}, true
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

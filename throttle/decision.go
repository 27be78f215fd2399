package throttle

import (
	"strconv"
	"time"
)

// Request is one job to decide.
type Request struct {
	// Tenant owns the job. Required; at most MaxTenantLen bytes.
	Tenant string
	// JobID names the job for its reservation, e.g. its stream sequence.
	// It must be unique among the tenant's jobs that may wait at once.
	// Empty means no reservation: a job that must wait is not charged.
	JobID string
	// Cost is the number of tokens the job takes. Defaults to 1.
	Cost int64
	// At is the time of the decision. Defaults to Redis TIME. Set it only
	// for deterministic tests or replays, and never let it run slower than
	// real time: the state's keys expire by Redis's clock once they hold
	// nothing more by At's (a bucket full again, a window's admissions out
	// of its span), so a clock that falls behind finds them forgotten.
	At time.Time
	// Limits overrides the tenant's limits for this one request when
	// non-empty; whether they are shadowed still comes from its Policy.
	Limits Limits
}

// Copy is one incarnation of a job to decide. JobID is required: it names
// the job's owner record as well as its reservation.
type Copy struct {
	Request
	// Incarnation tells the incarnations of a job apart: a number unique to
	// the message carrying it, in [0, 2^53), such as its stream sequence.
	// The original and every copy differ, and so do two copies of one move
	// (stored twice when the move was redone after its dedup window).
	Incarnation int64
	// Fresh says this is the first delivery of the original, never decided
	// before: it holds no reservation, so its reservation is not read
	// (which saves Redis a read per job), and admitted at once it records
	// no owner (no copy of it can exist). Set it only when that is
	// certain: a fresh job that does hold a slot is charged again.
	Fresh bool
	// Order is the copy's place in its tenant's waiting list, should it
	// wait for a lease of its tenant's running cap: the job's order of
	// arrival, such as the stream sequence of its first delivery, the same
	// for every copy, so that the list keeps the order jobs arrived in
	// whichever worker decides each. 0 means the time it joins the list.
	Order int64
	// Woken says the copy was brought back in its turn under a running
	// cap (a Result.Wake): should the fleet's cap (MaxRunning) hold it
	// back, it waits at the head of the fleet's list, not behind its
	// tenant's other jobs, whose turns its tenant's cap, whose place it
	// holds, would refuse meanwhile.
	Woken bool
	// Group is the job's group (an organisation, a plan, an endpoint),
	// whose limit it shares with the group's other tenants' jobs; empty
	// for none. Only a Decider built WithLevels reads it.
	Group string
	// Released says the copy was brought back by a top-up's release of the
	// jobs waiting for credits (Limiter.AddCredits): it passes the gate
	// that holds every other job back until the release is done
	// (Limiter.OpenCredits). It still waits behind the first job waiting.
	Released bool
}

// Outcome is what a decision tells the job to do.
type Outcome int

// The outcomes of a decision.
const (
	// Admitted: run the job now. It was charged, or it came back for the
	// slot it held (charged then).
	Admitted Outcome = iota + 1
	// Reserved: wait. A slot is held for the job at Wait from now, and it
	// was charged for it: coming back after Wait, it is admitted without a
	// second charge.
	Reserved
	// Limited: wait. Nothing was charged (the job has no id, or its slot
	// would lie past the horizon): try again after Wait.
	Limited
	// Duplicate: another incarnation of the job ran (Decision.Owner names
	// it); this one must not. Only a Decider decides this.
	Duplicate
	// Capped: wait for a lease. The tenant (or the fleet) runs as many jobs
	// as its running cap allows; the job joined the cap's waiting list,
	// behind Decision.Ahead others, and nothing was charged. It is woken in
	// its turn: another call names it in Result.Wake. Only a Decider
	// decides this.
	Capped
	// Unfunded: wait for credits. The tenant's policy draws on a prepaid
	// balance (Policy.Credits) that does not cover the job now, and
	// nothing was charged. With a Wait, come back after it (a top-up's
	// release is under way: the gate holds new jobs back); with none, wait
	// for a top-up (or, when Decision.CreditsDeadLetter, dead-letter it).
	Unfunded
	// Queued: wait for a turn under a limit above the tenant
	// (Decision.LevelName: a group's or the global one, Shared). The job
	// joined the level's waiting list, behind Decision.Ahead others, and
	// nothing was charged. It is woken in its turn: another call names it
	// in Result.Called. Only a Decider built WithLevels decides this.
	Queued
)

// String names o.
func (o Outcome) String() string {
	switch o {
	case Admitted:
		return "admitted"
	case Reserved:
		return "reserved"
	case Limited:
		return "limited"
	case Duplicate:
		return "duplicate"
	case Capped:
		return "capped"
	case Unfunded:
		return "unfunded"
	case Queued:
		return "queued"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// CapKind says which running cap a Capped job waits under.
type CapKind int

// The running caps a job may wait under.
const (
	// TenantCap is the cap of the job's tenant, Policy.Running.
	TenantCap CapKind = iota + 1
	// FleetCap is the cap over every tenant together,
	// CapOptions.MaxRunning.
	FleetCap
)

// String names k.
func (k CapKind) String() string {
	switch k {
	case TenantCap:
		return "tenant"
	case FleetCap:
		return "fleet"
	}
	return "CapKind(" + strconv.Itoa(int(k)) + ")"
}

// Decision is the outcome of one request.
type Decision struct {
	// Outcome says what the job must do.
	Outcome Outcome
	// Wait is how long the job must wait before coming back: 0 when
	// Admitted or Duplicate. It is rounded up to the microsecond, never down.
	Wait time.Duration
	// Remaining is the number of whole tokens left in the tightest limit
	// after the decision. It is 0 for a Reserved job, for a Duplicate, and
	// for a job admitted through the slot it held, whose decision does not
	// read the buckets.
	Remaining int64
	// Owner is the incarnation that ran, when Duplicate.
	Owner int64
	// Binding is the limit that set Wait (or ShadowWait): the one of the
	// tenant's limits that would leave the job waiting longest. It is the
	// zero Limit when there is no wait, and the tenant's first limit for a
	// job that came back before the slot it holds.
	Binding Limit
	// Shadow says the tenant's policy is in shadow mode: the job is
	// Admitted whatever its buckets say, which are the tenant's shadow
	// buckets, never the enforced ones.
	Shadow bool
	// ShadowWait, in shadow mode, is the wait enforcing would have imposed
	// (0 when it would have admitted the job): the job was charged for it
	// in the shadow buckets as a Reserved job would have been.
	ShadowWait time.Duration
	// Lease and FleetLease are the places an Admitted job holds under its
	// tenant's running cap and under the fleet's, each the zero Lease when
	// there is no such cap, until given back with RunningCaps.Finish.
	Lease, FleetLease Lease
	// CapKind says which cap a Capped job waits under: its tenant's or
	// the fleet's. It is 0 for any other outcome.
	CapKind CapKind
	// CappedBy names the cap a Capped job waits under, for people to read
	// (logs, the reason a parked job carries): "running:N", or
	// "max running:N" for the fleet's. Code tells the caps apart by
	// CapKind.
	CappedBy string
	// Ahead, when Capped, is how many jobs wait before this one, and Cap
	// the cap's N.
	Ahead, Cap int64
	// Running, when Capped, is how many leases of the cap counted.
	Running int64
	// Balance, when Unfunded, is the balance the job could not draw on
	// (what earlier jobs of its call left of it).
	Balance int64
	// Untrusted, when Unfunded, says the balance was written before Redis
	// last restarted or failed over, which may have lost writes since: no
	// job is admitted against it until an operator adds or sets credits.
	Untrusted bool
	// CreditsDeadLetter, when Unfunded, says the tenant's policy is
	// credits:dlq: a job refused without a Wait is dead-lettered, not
	// kept waiting.
	CreditsDeadLetter bool
	// ShadowUnfunded, in shadow mode, says enforcing the tenant's credits
	// would have refused the job (it was not charged).
	ShadowUnfunded bool
	// LevelName names the limit above the tenant (Level.String) that set
	// Wait or queued the job, or, with ShadowWait, that would have; empty
	// when the tenant's own limits decided.
	LevelName string
}

// Leases returns the leases d holds, the tenant's first.
func (d Decision) Leases() []Lease {
	var out []Lease
	if d.Lease.Token != "" {
		out = append(out, d.Lease)
	}
	if d.FleetLease.Token != "" {
		out = append(out, d.FleetLease)
	}
	return out
}

// Result is the outcome of one request of a batch.
type Result struct {
	Decision
	// Err is nil, or an error matching ErrInvalid or ErrRedis.
	Err error
	// Wake names the jobs waiting for a lease whose turn this decision
	// made (a Decider's only): the caller must wake them, whatever Err says.
	Wake []Waiter
	// Called names the jobs waiting under a shared level (Queued) whose
	// turn this decision's calls made: the caller must wake them too.
	Called []Waiter
}

// Lease is one run's place under a running cap, held from its admission
// (Decision.Leases) until it is given back (RunningCaps.Finish) or, if its
// worker dies, until it expires.
type Lease struct {
	// Tenant is the tenant whose cap it counts against; "" for the fleet's
	// cap (CapOptions.MaxRunning).
	Tenant string
	// Token names the run: unique to it, so that only it can give the
	// lease back (compare and delete).
	Token string
}

// Waiter is a job waiting for a lease whose turn came: the caller that
// got it must wake the job (bring its parked message back), which then
// finds its place held for CallTTL.
type Waiter struct {
	Tenant string
	JobID  string
	// Level and Cost, for a job a shared level called: the level's name
	// (Level.String) and the job's cost, to give its turn back
	// (Shared.Forfeit); empty and 0 for a running cap's.
	Level string
	Cost  int64
}

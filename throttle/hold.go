package throttle

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// Hold holds tenant back until until, fleet-wide: every enforced bucket of
// the tenant's current policy is set to be empty at until at the earliest,
// so that no Limiter sharing this Redis admits another of its jobs before
// then (a bucket already in debt past until keeps its debt). Jobs already
// holding slots before until keep them: they were charged when they got
// them. The worker calls it when a tenant's downstream asks it to wait.
//
// A shadowed tenant has no enforced buckets: nothing is held. An until
// not after Redis' clock holds nothing; one more than 30 days ahead is
// refused (ErrInvalid).
func (l *Limiter) Hold(ctx context.Context, tenant string, until time.Time) error {
	return l.HoldAt(ctx, tenant, time.Time{}, until)
}

// HoldAt is Hold with now given: at is the time of the call, zero meaning
// Redis TIME, as for a Request's At. Tests use it with fixed times.
func (l *Limiter) HoldAt(ctx context.Context, tenant string, at, until time.Time) error {
	return l.HoldJobAt(ctx, tenant, "", at, until)
}

// HoldJobAt is HoldAt, and gives the job told to wait, jobID (none when
// ""), the slot at until: decided again from then with its job id, it is
// admitted without a second charge (it was charged when first admitted),
// ahead of the jobs that arrived during the hold, whose slots start one
// token after until. A tenant with a sliding or calendar window holds its
// buckets only, and its job gets no slot: it is decided again as any.
func (l *Limiter) HoldJobAt(ctx context.Context, tenant, jobID string, at, until time.Time) error {
	tag, err := l.keys.tag(tenant)
	if err != nil {
		return err
	}
	if jobID != "" {
		if err := validJobID(jobID); err != nil {
			return err
		}
	}
	pol := l.policies.Policy(tenant)
	if pol.Limits.hasWindow() {
		// The job's slot would be reserved under other limits than its
		// decisions name (the regime of every limit, windows too).
		jobID = ""
	}
	// A hold moves token buckets only: a sliding window's entries are
	// admissions, and a tenant of windows alone is not held here.
	pol.Limits = pol.Limits.buckets()
	if pol.Shadow || len(pol.Limits) == 0 {
		return nil
	}
	if until.UnixMicro() < 0 || until.UnixMicro() >= maxExact {
		return &InvalidError{Code: CodeHorizon, Detail: "hold until " + until.String() + " out of range"}
	}
	now := "0"
	if !at.IsZero() {
		now = strconv.FormatInt(at.UnixMicro(), 10)
	}
	keys := make([]string, 0, len(pol.Limits)+2)
	args := make([]any, 0, 2+3*len(pol.Limits))
	args = append(args, now, strconv.FormatInt(until.UnixMicro(), 10))
	for _, lim := range pol.Limits {
		keys = append(keys, l.keys.prefix+":"+tag+limitKeySuffix(lim, false))
		args = append(args, strconv.FormatInt(lim.Rate, 10), strconv.FormatInt(lim.periodMicros(), 10), strconv.FormatInt(lim.Burst, 10))
	}
	if jobID != "" {
		keys = append(keys, l.keys.reservation(tag, jobID), l.keys.shift(tag))
	}
	v, err := l.lib.call(ctx, l.lib.hold, keys, args...)
	if err != nil {
		return err
	}
	at0 := keys[0]
	if v[0] == statusWrongType && v[1] >= 1 && int(v[1]) <= len(keys) {
		at0 = keys[v[1]-1]
	}
	return replyStatus(l.lib.hold, at0, v)
}

// Holds keeps the holds of tenants whose downstream asked the worker to
// wait (Retry-After): it holds a tenant back fleet-wide (Limiter.Hold) and
// lets the job that was told to wait go, giving up its owner record
// (Owners.Release), so that its deferred copy may run. It is safe for
// concurrent use.
type Holds struct {
	l      *Limiter
	owners *Owners
}

// NewHolds returns the Holds of l's tenants, releasing the owner records
// of owners.
func NewHolds(l *Limiter, owners *Owners) (*Holds, error) {
	if l == nil || owners == nil {
		return nil, errors.New("throttle: nil limiter or owners")
	}
	return &Holds{l: l, owners: owners}, nil
}

// Hold holds tenant back until until, as Limiter.Hold does, and gives
// the job told to wait, jobID, the slot at until (Limiter.HoldJobAt), so
// that it runs first when the hold ends.
func (h *Holds) Hold(ctx context.Context, tenant, jobID string, until time.Time) error {
	return h.l.HoldJobAt(ctx, tenant, jobID, time.Time{}, until)
}

// Release gives up the owner record of the tenant's job that was told to
// wait if it names incarnation, as Owners.Release does, and reports
// whether it did.
func (h *Holds) Release(ctx context.Context, tenant, jobID string, incarnation int64) (bool, error) {
	return h.owners.Release(ctx, tenant, jobID, incarnation)
}

package throttle

import (
	"context"
	"errors"
	"strconv"
)

// Owners claims and gives up the owner records of jobs, the records by
// which a Decider tells the incarnation of a job that ran from the others
// (Duplicate). It is safe for concurrent use.
type Owners struct {
	l *Limiter
}

// NewOwners returns the Owners of l's jobs.
func NewOwners(l *Limiter) (*Owners, error) {
	if l == nil {
		return nil, errors.New("throttle: nil limiter")
	}
	return &Owners{l: l}, nil
}

// Claim makes incarnation the owner of the tenant's job if no incarnation
// owns it yet, for as long as a decision would keep the record (the horizon
// plus the tenant's longest fill time). It reports whether it did, and the
// owner after the call. Every other incarnation of the job is then a
// Duplicate until the record is given up or expires. The worker's fast
// lane claims a job this way before it copies the job out of a backlog.
func (o *Owners) Claim(ctx context.Context, tenant, jobID string, incarnation int64) (claimed bool, owner int64, err error) {
	key, err := ownerKey(o.l.keys, tenant, jobID, incarnation)
	if err != nil {
		return false, 0, err
	}
	ttl := o.l.horizon + o.l.policies.Policy(tenant).Limits.longestFill()
	v, err := o.l.lib.call(ctx, o.l.lib.claim, []string{key},
		strconv.FormatInt(incarnation, 10), strconv.FormatInt(max(1, ttl.Milliseconds()), 10))
	if err != nil {
		return false, 0, err
	}
	if err := replyStatus(o.l.lib.claim, key, v); err != nil {
		return false, 0, err
	}
	return v[1] == 1, v[2], nil
}

// Release deletes the owner record of the tenant's job if it names
// incarnation, and reports whether it did.
func (o *Owners) Release(ctx context.Context, tenant, jobID string, incarnation int64) (bool, error) {
	key, err := ownerKey(o.l.keys, tenant, jobID, incarnation)
	if err != nil {
		return false, err
	}
	v, err := o.l.lib.call(ctx, o.l.lib.release, []string{key}, strconv.FormatInt(incarnation, 10))
	if err != nil {
		return false, err
	}
	if err := replyStatus(o.l.lib.release, key, v); err != nil {
		return false, err
	}
	return v[1] == 1, nil
}

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

// giveUpCapped gives up the owner record of each copy the fleet's cap
// made wait, as admit does for a tenant's cap (the fleet's call cannot:
// the record lies in the tenant's slot): see giveUpOwners.
func giveUpCapped(ctx context.Context, l *Limiter, copies []Copy, results []Result) {
	var idx []int
	for i := range copies {
		if results[i].Err == nil && results[i].Outcome == Capped {
			idx = append(idx, i)
		}
	}
	giveUpOwners(ctx, l, copies, results, idx)
}

// giveUpOwners gives up the owner record of each copy of idx that is not
// fresh, if the record names the copy's incarnation, in one round trip
// (none when there is none): a limit decided outside its tenant's call
// made it wait, so it did not run, and the copy its park or move makes
// must be free to, as decide gives ownership up when it defers an owner
// (OWNER in lua/head.lua). Such an owner is a fast lane's copy, whose
// claim names it, or an incarnation redelivered after its worker died. A
// copy whose record could not be given up gets the error instead of its
// decision, so that it is not parked.
func giveUpOwners(ctx context.Context, l *Limiter, copies []Copy, results []Result, idx []int) {
	var calls []fcall
	var of []int
	for _, i := range idx {
		cp := copies[i]
		if cp.Fresh {
			continue
		}
		key, err := ownerKey(l.keys, cp.Tenant, cp.JobID, cp.Incarnation)
		if err != nil {
			results[i].Err = err
			continue
		}
		calls = append(calls, fcall{fn: l.lib.release, keys: []string{key}, args: []any{strconv.FormatInt(cp.Incarnation, 10)}})
		of = append(of, i)
	}
	if len(calls) == 0 {
		return
	}
	l.lib.run(ctx, calls)
	for k, f := range calls {
		v, err := replyInts(f.cmd, f.fn, 4)
		if err == nil {
			err = replyStatus(f.fn, f.keys[0], v)
		}
		if err != nil {
			results[of[k]].Decision, results[of[k]].Err = Decision{}, err
		}
	}
}

package throttle

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Copies decides jobs that may exist as several messages, so that only one
// of them runs. A job may be moved off its queue (re-published as a copy to
// fire at its slot, the original acked); if the worker dies between the
// two, both the original and the copy exist, and a move redone after a long
// outage can even leave two copies. Each message is an incarnation of the
// job, named by a number unique to it (Copy.Incarnation).
//
// Copies keeps an owner record per job, read and written in the same
// atomic function call as the rate decision: an incarnation that is
// admitted records itself as the owner (all but a Fresh original admitted
// at once, which has no copy), and any other incarnation decided later is a
// Duplicate. An owner decided again and deferred (it did not run: its
// handler failed, say) gives ownership up, so that the copy its move makes
// may run. The record lives as long as a reservation: the horizon plus the
// tenant's longest fill time.
//
// Copies is safe for concurrent use by many goroutines.
type Copies struct {
	l          *Limiter
	failureTTL any // the failure counter's TTL in ms, as the function reads it
	caps       CapOptions
}

// NewCopies returns the Copies of l's jobs. failureTTL is how long a job's
// failure count (see Failed) lives after its last failure, in [1ms, 30
// days].
func NewCopies(l *Limiter, failureTTL time.Duration) (*Copies, error) {
	if l == nil {
		return nil, errors.New("throttle: nil limiter")
	}
	if failureTTL < time.Millisecond || failureTTL > MaxHorizon {
		return nil, fmt.Errorf("throttle: failure TTL %s out of range [1ms, %s]", failureTTL, MaxHorizon)
	}
	return &Copies{l: l, failureTTL: strconv.FormatInt(failureTTL.Milliseconds(), 10),
		caps: CapOptions{LeaseTTL: DefaultLeaseTTL, CallTTL: DefaultCallTTL}}, nil
}

// WithCaps returns Copies that enforce running caps with o: a tenant's
// Policy.Running, and o.MaxRunning over all tenants (see Decide).
func (c *Copies) WithCaps(o CapOptions) (*Copies, error) {
	if o.LeaseTTL == 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.CallTTL == 0 {
		o.CallTTL = DefaultCallTTL
	}
	switch {
	case o.MaxRunning < 0 || o.MaxRunning > MaxRunning:
		return nil, fmt.Errorf("throttle: max running %d out of range [0, %d]", o.MaxRunning, MaxRunning)
	case o.LeaseTTL < time.Millisecond || o.LeaseTTL > MaxHorizon:
		return nil, fmt.Errorf("throttle: lease TTL %s out of range [1ms, %s]", o.LeaseTTL, MaxHorizon)
	case o.CallTTL < time.Millisecond || o.CallTTL > MaxHorizon:
		return nil, fmt.Errorf("throttle: call TTL %s out of range [1ms, %s]", o.CallTTL, MaxHorizon)
	}
	out := *c
	out.caps = o
	return &out, nil
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
}

// Decide decides one copy, as DecideBatch does.
func (c *Copies) Decide(ctx context.Context, cp Copy) (Decision, error) {
	r := c.DecideBatch(ctx, []Copy{cp})
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
// caller renews while the job runs (Renew) and gives back when it ends
// (Finish); or Capped, queued for a lease. With CapOptions.MaxRunning,
// every copy first takes a lease of the fleet's cap, in one more round
// trip, and gives it back in a third when it is not admitted. Result.Wake
// names the waiting jobs whose turn a call made: the caller wakes them.
func (c *Copies) DecideBatch(ctx context.Context, copies []Copy) []Result {
	if c.caps.MaxRunning == 0 && !c.anyCapped(copies) {
		return c.l.decideBatch(ctx, len(copies), func(i int) (prepared, error) { return c.prepare(copies[i]) })
	}
	return c.decideCapped(ctx, copies)
}

// anyCapped reports whether some copy's tenant has a running cap.
func (c *Copies) anyCapped(copies []Copy) bool {
	for _, cp := range copies {
		if p := c.l.policies.Policy(cp.Tenant); p.Running > 0 && !p.Shadow {
			return true
		}
	}
	return false
}

// prepare validates cp and builds the pieces of its function call.
func (c *Copies) prepare(cp Copy) (prepared, error) {
	if cp.JobID == "" {
		return prepared{}, &InvalidError{Code: CodeJobID, Detail: "a copy needs a job id"}
	}
	if err := validIncarnation(cp.Incarnation); err != nil {
		return prepared{}, err
	}
	p, err := c.l.prepare(cp.Request)
	if err != nil {
		return prepared{}, err
	}
	p.ownerKey = c.l.keys.owner(p.tag, cp.JobID)
	p.incarnation = strconv.FormatInt(cp.Incarnation, 10)
	p.fresh = cp.Fresh
	return p, nil
}

// prepareCapped prepares a copy of a tenant whose policy caps its running
// jobs at pol.Running: it may have no limits.
func (c *Copies) prepareCapped(cp Copy, pol Policy) (prepared, error) {
	var p prepared
	var err error
	if len(pol.Limits) == 0 && len(cp.Limits) == 0 {
		p, err = c.prepare(Copy{Request: Request{Tenant: cp.Tenant, JobID: cp.JobID, Cost: cp.Cost, At: cp.At,
			Limits: Limits{{Rate: 1, Period: time.Second, Burst: MaxBurst}}}, Incarnation: cp.Incarnation, Fresh: cp.Fresh})
		p.limitKeys, p.limitArgs, p.limits = nil, nil, nil
	} else {
		p, err = c.prepare(cp)
	}
	if err != nil {
		return prepared{}, err
	}
	leases, queue, err := c.l.keys.capKeys(cp.Tenant)
	if err != nil {
		return prepared{}, err
	}
	places, err := c.l.keys.capPlaces(cp.Tenant)
	if err != nil {
		return prepared{}, err
	}
	token, err := newToken()
	if err != nil {
		return prepared{}, err
	}
	if cp.Order < 0 || cp.Order >= maxExact {
		return prepared{}, &InvalidError{Code: CodeMember, Detail: fmt.Sprintf("order %d outside [0, 2^53)", cp.Order)}
	}
	p.cap = &capCall{n: pol.Running, leases: leases, queue: queue, places: places, member: cp.JobID, order: cp.Order, token: token}
	return p, nil
}

// prepareFleet prepares the fleet's cap call of a copy.
func (c *Copies) prepareFleet(cp Copy) (prepared, error) {
	if cp.JobID == "" {
		return prepared{}, &InvalidError{Code: CodeJobID, Detail: "a copy needs a job id"}
	}
	if err := validJobID(cp.JobID); err != nil {
		return prepared{}, err
	}
	member, err := c.l.keys.fleetMember(cp.Tenant, cp.JobID)
	if err != nil {
		return prepared{}, err
	}
	leases, queue, _ := c.l.keys.capKeys("")
	places, _ := c.l.keys.capPlaces("")
	token, err := newToken()
	if err != nil {
		return prepared{}, err
	}
	now := "0"
	if !cp.At.IsZero() {
		now = strconv.FormatInt(cp.At.UnixMicro(), 10)
	}
	// The fleet's list orders by fair places; order says only whether the
	// job was called (lua/caps.lua, FAIR).
	var order int64
	if cp.Woken {
		order = 1
	}
	return prepared{now: now, cap: &capCall{n: c.caps.MaxRunning, leases: leases, queue: queue, places: places, member: member,
		order: order, token: token, fleet: true}}, nil
}

// Claim makes incarnation the owner of the tenant's job if no incarnation
// owns it yet, for as long as a decision would keep the record (the horizon
// plus the tenant's longest fill time). It reports whether it did, and the
// owner after the call. Every other incarnation of the job is then a
// Duplicate until the record is given up or expires. The worker's fast
// lane claims a job this way before it copies the job out of a backlog.
func (c *Copies) Claim(ctx context.Context, tenant, jobID string, incarnation int64) (claimed bool, owner int64, err error) {
	key, err := c.ownerKey(tenant, jobID, incarnation)
	if err != nil {
		return false, 0, err
	}
	ttl := c.l.horizon + c.l.policies.Policy(tenant).Limits.longestFill()
	v, err := c.l.lib.call(ctx, c.l.lib.claim, []string{key},
		strconv.FormatInt(incarnation, 10), strconv.FormatInt(max(1, ttl.Milliseconds()), 10))
	if err != nil {
		return false, 0, err
	}
	if err := replyStatus(c.l.lib.claim, key, v); err != nil {
		return false, 0, err
	}
	return v[1] == 1, v[2], nil
}

// Release deletes the owner record of the tenant's job if it names
// incarnation, and reports whether it did.
func (c *Copies) Release(ctx context.Context, tenant, jobID string, incarnation int64) (bool, error) {
	key, err := c.ownerKey(tenant, jobID, incarnation)
	if err != nil {
		return false, err
	}
	v, err := c.l.lib.call(ctx, c.l.lib.release, []string{key}, strconv.FormatInt(incarnation, 10))
	if err != nil {
		return false, err
	}
	if err := replyStatus(c.l.lib.release, key, v); err != nil {
		return false, err
	}
	return v[1] == 1, nil
}

// Failed records one more handler failure of the tenant's job and returns
// how many have been recorded, this one included. While the count stays
// below giveUpAt it also gives up the job's owner record if that names
// incarnation, the incarnation that failed, in the same atomic call: it did
// not run to success, so the job's next incarnation, a moved copy included,
// must be free to run. At giveUpAt the record is kept, as the job is given
// up. It reports whether the record was released.
func (c *Copies) Failed(ctx context.Context, tenant, jobID string, incarnation, giveUpAt int64) (n int64, released bool, err error) {
	if err := validIncarnation(incarnation); err != nil {
		return 0, false, err
	}
	if giveUpAt < 1 || giveUpAt > 1_000_000 {
		return 0, false, &InvalidError{Code: CodeGiveUp, Detail: fmt.Sprintf("give-up count %d outside [1, 10^6]", giveUpAt)}
	}
	tag, err := jobTag(c.l.keys, tenant, jobID)
	if err != nil {
		return 0, false, err
	}
	keys := []string{c.l.keys.failures(tag, jobID), c.l.keys.owner(tag, jobID)}
	return countFailure(ctx, c.l.lib, keys, c.failureTTL, strconv.FormatInt(incarnation, 10), strconv.FormatInt(giveUpAt, 10))
}

// ownerKey validates a claim or release and returns the owner key.
func (c *Copies) ownerKey(tenant, jobID string, incarnation int64) (string, error) {
	if err := validIncarnation(incarnation); err != nil {
		return "", err
	}
	tag, err := jobTag(c.l.keys, tenant, jobID)
	if err != nil {
		return "", err
	}
	return c.l.keys.owner(tag, jobID), nil
}

// replyStatus reads the status of a reply of one of the functions outside
// decide (claim, release, carry, hold): nil when it did its work, else the
// error its status names; key is the key named in a WRONGTYPE error.
func replyStatus(fn, key string, v []int64) error {
	switch v[0] {
	case statusAdmitted:
		return nil
	case statusInvalid:
		return &InvalidError{Code: Code(v[1]), Index: int(v[2])}
	case statusWrongType:
		return &RedisError{Op: "FCALL " + fn, Err: fmt.Errorf("WRONGTYPE key %s holds another type than a string", key)}
	}
	return &RedisError{Op: "FCALL " + fn, Err: fmt.Errorf("unexpected reply %v", v)}
}

// jobTag validates a tenant and a job id and returns the tenant's tag.
func jobTag(k keyspace, tenant, jobID string) (string, error) {
	tag, err := k.tag(tenant)
	if err != nil {
		return "", err
	}
	if jobID == "" {
		return "", &InvalidError{Code: CodeJobID, Detail: "empty job id"}
	}
	if err := validJobID(jobID); err != nil {
		return "", err
	}
	return tag, nil
}

// validIncarnation reports whether inc is in [0, 2^53).
func validIncarnation(inc int64) error {
	if inc < 0 || inc >= maxExact {
		return &InvalidError{Code: CodeIncarnation, Detail: fmt.Sprintf("incarnation %d outside [0, 2^53)", inc)}
	}
	return nil
}

// longestFill is the longest time any of the limits takes to refill from
// empty, rounded up to the microsecond.
func (ls Limits) longestFill() time.Duration {
	var longest int64
	for _, lim := range ls {
		// burst*period < 2^53 µs (Limit.Validate), so this cannot overflow.
		fill := (lim.Burst*lim.periodMicros() + lim.Rate - 1) / lim.Rate
		longest = max(longest, fill)
	}
	return time.Duration(longest) * time.Microsecond
}

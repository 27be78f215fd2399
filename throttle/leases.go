package throttle

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/throttler/throttler/lua"
)

// Lease operations of the lease function.
const (
	leaseRelease = "1"
	leaseRenew   = "2"
	leasePoke    = "3"
)

// leaseCall builds one call of the lease function on the cap of tenant
// ("" for the fleet's).
func (c *RunningCaps) leaseCall(op, tenant string, tokens ...string) (fcall, error) {
	leases, queue, err := c.l.keys.capKeys(tenant)
	if err != nil {
		return fcall{}, err
	}
	places, err := c.l.keys.capPlaces(tenant)
	if err != nil {
		return fcall{}, err
	}
	lt, ct, rt := c.capTTLs(tenant)
	now := "0"
	if c.o.At != nil {
		now = strconv.FormatInt(c.o.At().UnixMicro(), 10)
	}
	args := []any{op, now, strconv.FormatInt(c.capOf(tenant), 10), lt, ct, rt}
	for _, t := range tokens {
		args = append(args, t)
	}
	keys := []string{leases, queue, places}
	if tenant == "" {
		keys = append(keys, c.l.keys.fairKey())
	}
	return fcall{fn: c.l.lib.lease, keys: keys, args: args}, nil
}

// leaseReply reads the reply of a lease call: its count, whether it left
// expired entries for another call to drop (lua/head.lua, BOUNDS), and
// the members or tokens that follow.
func leaseReply(f fcall) (n int64, more bool, rest []any, err error) {
	v, err := f.cmd.Result()
	if err != nil {
		_, err = replyInts(f.cmd, f.fn, 4)
		return 0, false, nil, err
	}
	arr, ok := v.([]any)
	if !ok || len(arr) < 4 {
		return 0, false, nil, &RedisError{Op: "FCALL " + f.fn, Err: fmt.Errorf("reply %#v, want 4 integers and members", v)}
	}
	var t [4]int64
	for i := range t {
		if t[i], ok = arr[i].(int64); !ok {
			return 0, false, nil, &RedisError{Op: "FCALL " + f.fn, Err: fmt.Errorf("reply element %d is %T, want an integer", i, arr[i])}
		}
	}
	if err := replyStatus(f.fn, f.keys[0], t[:]); err != nil {
		return 0, false, nil, err
	}
	return t[1], t[2] == 1, arr[4:], nil
}

// Finish gives back the leases of a run that ended (compare and delete:
// only the leases its tokens name), in one round trip, and returns the
// waiting jobs whose turn that made: the caller wakes them.
func (c *RunningCaps) Finish(ctx context.Context, leases []Lease) ([]Waiter, error) {
	calls := make([]fcall, 0, len(leases))
	for _, ls := range leases {
		f, err := c.leaseCall(leaseRelease, ls.Tenant, ls.Token)
		if err != nil {
			return nil, err
		}
		calls = append(calls, f)
	}
	return c.runLeaseCalls(ctx, calls, func(k int) string { return leases[k].Tenant })
}

// Forfeit gives up the place held for a waiting job that was called but
// cannot be woken (its parked message is gone): the place goes to the
// next in line, returned for the caller to wake.
func (c *RunningCaps) Forfeit(ctx context.Context, w Waiter, fleet bool) ([]Waiter, error) {
	member, tenant := w.JobID, w.Tenant
	if fleet {
		m, err := c.l.keys.fleetMember(w.Tenant, w.JobID)
		if err != nil {
			return nil, err
		}
		member, tenant = m, ""
	}
	f, err := c.leaseCall(leaseRelease, tenant, "c:"+member)
	if err != nil {
		return nil, err
	}
	return c.runLeaseCalls(ctx, []fcall{f}, func(int) string { return tenant })
}

// Poke drops the expired leases of tenant's cap ("" for the fleet's) and
// hands the room free to the head of its waiting list, returned for the
// caller to wake. A lease whose worker died frees no room until a call
// sees it expired: the worker pokes the caps it parks jobs under.
func (c *RunningCaps) Poke(ctx context.Context, tenants []string) ([]Waiter, error) {
	calls := make([]fcall, 0, len(tenants))
	for _, t := range tenants {
		f, err := c.leaseCall(leasePoke, t)
		if err != nil {
			return nil, err
		}
		calls = append(calls, f)
	}
	return c.runLeaseCalls(ctx, calls, func(k int) string { return tenants[k] })
}

// sweepRounds bounds the rounds of pokes one call of runLeaseCalls sends
// to drop expired entries: lua.MaxSweep each, so a burst of expired
// leases far larger than a cap ever holds is dropped over a few Pokes,
// none of them slow.
const sweepRounds = 64

// runLeaseCalls sends calls of the lease function that free room, in one
// pipeline, and returns the waiters they called; tenant(k) is the tenant
// of the k-th call's cap ("" for the fleet's). A call that left expired
// entries to drop called nobody (lua/head.lua, BOUNDS): its cap is
// poked again, in one more pipeline per round, until every sweep is done
// or sweepRounds rounds were sent; the next Poke goes on from there.
func (c *RunningCaps) runLeaseCalls(ctx context.Context, calls []fcall, tenant func(k int) string) ([]Waiter, error) {
	var wake []Waiter
	var first error
	for round := 0; len(calls) > 0 && round < sweepRounds; round++ {
		c.l.lib.run(ctx, calls)
		var again []fcall
		var againTenants []string
		for k, f := range calls {
			_, more, members, err := leaseReply(f)
			if err != nil {
				first = cmpErr(first, err)
				continue
			}
			t := tenant(k)
			wake = append(wake, waiters(t, t == "", members)...)
			if !more {
				continue
			}
			poke, err := c.leaseCall(leasePoke, t)
			if err != nil {
				first = cmpErr(first, err)
				continue
			}
			again, againTenants = append(again, poke), append(againTenants, t)
		}
		if ctx.Err() != nil {
			return wake, cmpErr(first, ctx.Err())
		}
		calls, tenant = again, func(k int) string { return againTenants[k] }
	}
	return wake, first
}

// renewPipeline is the most renew calls (of lua.MaxRenew leases each)
// Renew sends in one round trip.
const renewPipeline = 32

// Renew extends each lease that still counts to LeaseTTL from now, and
// returns those that had expired: their runs lost their places, which may
// be another run's by now. A cap's tokens go at most lua.MaxRenew to a
// call (the function's bound), pipelined.
func (c *RunningCaps) Renew(ctx context.Context, leases []Lease) (lost []Lease, err error) {
	byCap := map[string][]string{}
	var order []string
	for _, ls := range leases {
		if _, ok := byCap[ls.Tenant]; !ok {
			order = append(order, ls.Tenant)
		}
		byCap[ls.Tenant] = append(byCap[ls.Tenant], ls.Token)
	}
	var calls []fcall
	var capOf []string
	for _, t := range order {
		for tokens := range slices.Chunk(byCap[t], lua.MaxRenew) {
			f, err := c.leaseCall(leaseRenew, t, tokens...)
			if err != nil {
				return nil, err
			}
			calls, capOf = append(calls, f), append(capOf, t)
		}
	}
	// A pipeline of many full calls could outlast the client's read
	// timeout: a round trip carries at most renewPipeline of them.
	for part := range slices.Chunk(calls, renewPipeline) {
		c.l.lib.run(ctx, part)
	}
	for k, f := range calls {
		_, _, tokens, e := leaseReply(f)
		if e != nil {
			err = cmpErr(err, e)
			continue
		}
		for _, tk := range tokens {
			if s, ok := tk.(string); ok {
				lost = append(lost, Lease{Tenant: capOf[k], Token: s})
			}
		}
	}
	return lost, err
}

// cmpErr keeps the first error.
func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

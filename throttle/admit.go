package throttle

import (
	"context"
	"fmt"
	"strconv"
)

// admitCall builds the function call that decides p under its cap (see
// lua/caps.lua, RUNNING CAPS).
func (c *Copies) admitCall(p prepared, tenant string) fcall {
	lt, ct, rt := c.capTTLs(tenant)
	f := fcall{fn: c.l.lib.admit}
	f.keys = []string{p.cap.leases, p.cap.queue, p.cap.places}
	f.args = []any{strconv.FormatInt(p.cap.n, 10), p.cap.token, lt, ct, rt, p.cap.member, strconv.FormatInt(p.cap.order, 10), arg(p.now)}
	if p.cap.fleet {
		f.keys = append(f.keys, c.l.keys.fairKey())
		return f
	}
	f.keys = append(append(f.keys, p.limitKeys...), p.resvKey, p.ownerKey)
	f.args = append(f.args, c.l.horizonArg, arg(p.cost), arg(p.incarnation), jobFlags[flag(p.fresh)+2*flag(p.shadow)],
		strconv.Itoa(len(p.limitKeys)))
	f.args = append(f.args, p.limitArgs...)
	return f
}

// Reply status of admit for a job the cap holds back.
const statusCapped = 6

// admitResult reads the reply of an admit call.
func (c *Copies) admitResult(f fcall, p prepared, tenant string) (Decision, []Waiter, error) {
	v, err := f.cmd.Result()
	if err != nil {
		_, err = replyInts(f.cmd, f.fn, 4)
		return Decision{}, nil, err
	}
	arr, ok := v.([]any)
	if !ok || len(arr) < 4 {
		return Decision{}, nil, &RedisError{Op: "FCALL " + f.fn, Err: fmt.Errorf("reply %#v, want 4 integers and members", v)}
	}
	var t [4]int64
	for i := range t {
		if t[i], ok = arr[i].(int64); !ok {
			return Decision{}, nil, &RedisError{Op: "FCALL " + f.fn, Err: fmt.Errorf("reply element %d is %T, want an integer", i, arr[i])}
		}
	}
	wake := c.waiters(tenant, p.cap.fleet, arr[4:])
	if t[0] == statusCapped {
		return Decision{Outcome: Capped, Ahead: t[1], Running: t[2], Cap: p.cap.n, CappedBy: capName(p.cap)}, wake, nil
	}
	one := call{parts: []prepared{p}, fcall: f}
	if p.cap.fleet {
		// The fleet's cap decides no rate: admitted is all it says.
		one.parts[0].limits = nil
	}
	d, err := one.tuple(0, t[:])
	if err == nil && d.Outcome == Admitted {
		d.Lease = Lease{Tenant: tenantOf(tenant, p.cap.fleet), Token: p.cap.token}
	}
	return d, wake, err
}

// capName says which cap held a job: "running:N", or "max running:N"
// for the fleet's.
func capName(cp *capCall) string {
	if cp.fleet {
		return "max running:" + strconv.FormatInt(cp.n, 10)
	}
	return RunningTerm + strconv.FormatInt(cp.n, 10)
}

// tenantOf is the Lease.Tenant of a cap: "" for the fleet's.
func tenantOf(tenant string, fleet bool) string {
	if fleet {
		return ""
	}
	return tenant
}

// waiters reads the members a call named to wake.
func (c *Copies) waiters(tenant string, fleet bool, members []any) []Waiter {
	var out []Waiter
	for _, m := range members {
		s, ok := m.(string)
		if !ok {
			continue
		}
		if !fleet {
			out = append(out, Waiter{Tenant: tenant, JobID: s})
			continue
		}
		if w, ok := parseFleetMember(s); ok {
			out = append(out, w)
		}
	}
	return out
}

// giveUpOwners gives up the owner record of each copy the fleet's cap
// held that names its incarnation, in one round trip, as admit does for a
// tenant's cap (the fleet's call cannot: the record lies in the tenant's
// slot). The copy did not run, and the copy its park makes must be free
// to: an incarnation redelivered after its worker died, say. A copy whose
// record could not be given up gets the error instead of Capped, so that
// it is not parked.
func (c *Copies) giveUpOwners(ctx context.Context, copies []Copy, results []Result) {
	var calls []fcall
	var idx []int
	for i, cp := range copies {
		if results[i].Err != nil || results[i].Outcome != Capped || cp.Fresh {
			continue
		}
		key, err := c.ownerKey(cp.Tenant, cp.JobID, cp.Incarnation)
		if err != nil {
			results[i].Err = err
			continue
		}
		calls = append(calls, fcall{fn: c.l.lib.release, keys: []string{key}, args: []any{strconv.FormatInt(cp.Incarnation, 10)}})
		idx = append(idx, i)
	}
	if len(calls) == 0 {
		return
	}
	c.l.lib.run(ctx, calls)
	for k, f := range calls {
		v, err := replyInts(f.cmd, f.fn, 4)
		if err == nil {
			err = replyStatus(f.fn, f.keys[0], v)
		}
		if err != nil {
			results[idx[k]].Decision, results[idx[k]].Err = Decision{}, err
		}
	}
}

// decideCapped is DecideBatch when running caps apply: the fleet's cap
// first (a round trip), then the tenants' caps and rates (one more: the
// capped copies' admit calls ride in the pipeline of the others' decide
// calls), then the fleet's leases of copies not admitted go back (one
// more, only when there are any).
func (c *Copies) decideCapped(ctx context.Context, copies []Copy) []Result {
	results := make([]Result, len(copies))
	fleet := make([]*Lease, len(copies))
	pending := make([]int, 0, len(copies))
	if c.caps.MaxRunning > 0 {
		var calls []fcall
		var idx []int
		var preps []prepared
		for i, cp := range copies {
			p, err := c.prepareFleet(cp)
			if err != nil {
				results[i].Err = err
				continue
			}
			calls, idx, preps = append(calls, c.admitCall(p, cp.Tenant)), append(idx, i), append(preps, p)
		}
		c.l.lib.run(ctx, calls)
		for k, f := range calls {
			i := idx[k]
			d, wake, err := c.admitResult(f, preps[k], copies[i].Tenant)
			results[i].Wake = append(results[i].Wake, wake...)
			switch {
			case err != nil:
				results[i].Err = err
			case d.Outcome != Admitted:
				results[i].Decision = d
			default:
				fleet[i] = &d.Lease
				pending = append(pending, i)
			}
		}
		c.giveUpOwners(ctx, copies, results)
	} else {
		for i := range copies {
			pending = append(pending, i)
		}
	}

	var plain []int // decided by decide
	var calls []fcall
	var idx []int
	var preps []prepared
	for _, i := range pending {
		pol := c.l.policies.Policy(copies[i].Tenant)
		if pol.Running == 0 || pol.Shadow {
			plain = append(plain, i)
			continue
		}
		p, err := c.prepareCapped(copies[i], pol)
		if err != nil {
			results[i].Err = err
			continue
		}
		calls, idx, preps = append(calls, c.admitCall(p, copies[i].Tenant)), append(idx, i), append(preps, p)
	}
	decided := c.l.decideBatchWith(ctx, len(plain), func(k int) (prepared, error) { return c.prepare(copies[plain[k]]) }, calls)
	for k, i := range plain {
		results[i].Decision, results[i].Err = decided[k].Decision, decided[k].Err
	}
	for k, f := range calls {
		i := idx[k]
		d, wake, err := c.admitResult(f, preps[k], copies[i].Tenant)
		results[i].Decision, results[i].Err = d, err
		results[i].Wake = append(results[i].Wake, wake...)
	}

	var back []Lease
	var backOf []int
	for i, ls := range fleet {
		if ls == nil {
			continue
		}
		if results[i].Err == nil && results[i].Outcome == Admitted {
			results[i].FleetLease = *ls
			continue
		}
		back, backOf = append(back, *ls), append(backOf, i)
	}
	if len(back) > 0 {
		// Woken jobs go with the first copy that gave its lease back: the
		// caller wakes every Wake of a batch alike.
		// The leases that could not be given back expire by themselves
		// after LeaseTTL: nothing is lost, the fleet runs fewer meanwhile.
		wake, _ := c.Finish(ctx, back)
		results[backOf[0]].Wake = append(results[backOf[0]].Wake, wake...)
	}
	return results
}

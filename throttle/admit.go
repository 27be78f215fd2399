package throttle

import (
	"context"
	"fmt"
	"strconv"
)

// admitCall builds the function call that decides p under its cap (see
// lua/caps.lua, RUNNING CAPS).
func (c *RunningCaps) admitCall(p prepared, tenant string) fcall {
	lt, ct, rt := c.capTTLs(tenant)
	f := fcall{fn: c.l.lib.admit}
	f.keys = []string{p.cap.leases, p.cap.queue, p.cap.places}
	f.args = []any{strconv.FormatInt(p.cap.n, 10), p.cap.token, lt, ct, rt, p.cap.member, strconv.FormatInt(p.cap.order, 10), arg(p.now)}
	if p.cap.fleet {
		f.keys = append(f.keys, c.l.keys.fairKey())
		return f
	}
	f.keys = append(append(f.keys, p.limitKeys...), p.resvKey, p.ownerKey, p.shiftKey)
	f.args = append(f.args, c.l.horizonArg, arg(p.cost), arg(p.incarnation), jobFlags[flag(p.fresh)+2*flag(p.shadow)],
		strconv.Itoa(len(p.limitKeys)))
	f.args = append(f.args, p.limitArgs...)
	return f
}

// admitEach decides each of preps under its cap, tenants[k] being
// preps[k]'s tenant, in one round trip.
func (c *RunningCaps) admitEach(ctx context.Context, preps []prepared, tenants []string) []Result {
	calls := make([]fcall, len(preps))
	for k, p := range preps {
		calls[k] = c.admitCall(p, tenants[k])
	}
	c.l.lib.run(ctx, calls)
	out := make([]Result, len(preps))
	for k := range calls {
		out[k].Decision, out[k].Wake, out[k].Err = c.admitResult(calls[k], preps[k], tenants[k])
	}
	return out
}

// Reply status of admit for a job the cap holds back.
const statusCapped = 6

// admitResult reads the reply of an admit call.
func (c *RunningCaps) admitResult(f fcall, p prepared, tenant string) (Decision, []Waiter, error) {
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
	wake := waiters(tenant, p.cap.fleet, arr[4:])
	if t[0] == statusCapped {
		return Decision{Outcome: Capped, Ahead: t[1], Running: t[2], Cap: p.cap.n, CapKind: p.cap.kind(), CappedBy: capName(p.cap)}, wake, nil
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

// waiters reads the members a call named to wake.
func waiters(tenant string, fleet bool, members []any) []Waiter {
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

package throttle

import (
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
	f.keys = append(append(f.keys, p.limitKeys...), p.resvKey, p.ownerKey)
	f.args = append(f.args, c.l.horizonArg, arg(p.cost), arg(p.incarnation), jobFlags[flag(p.fresh)+2*flag(p.shadow)],
		strconv.Itoa(len(p.limitKeys)))
	f.args = append(f.args, p.limitArgs...)
	return f
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
	wake := c.waiters(tenant, p.cap.fleet, arr[4:])
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

// capName says which cap held a job: "running:N", or "max running:N"
// for the fleet's.
func capName(cp *capCall) string {
	if cp.fleet {
		return "max running:" + strconv.FormatInt(cp.n, 10)
	}
	return RunningTerm + strconv.FormatInt(cp.n, 10)
}

// kind is the CapKind of the cap.
func (cp *capCall) kind() CapKind {
	if cp.fleet {
		return FleetCap
	}
	return TenantCap
}

// tenantOf is the Lease.Tenant of a cap: "" for the fleet's.
func tenantOf(tenant string, fleet bool) string {
	if fleet {
		return ""
	}
	return tenant
}

// waiters reads the members a call named to wake.
func (c *RunningCaps) waiters(tenant string, fleet bool, members []any) []Waiter {
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

// tenantCap is the call of the cap of cp's tenant, whose policy pol caps
// its running jobs.
func (c *RunningCaps) tenantCap(cp Copy, pol Policy) (*capCall, error) {
	leases, queue, err := c.l.keys.capKeys(cp.Tenant)
	if err != nil {
		return nil, err
	}
	places, err := c.l.keys.capPlaces(cp.Tenant)
	if err != nil {
		return nil, err
	}
	token, err := newToken()
	if err != nil {
		return nil, err
	}
	if cp.Order < 0 || cp.Order >= maxExact {
		return nil, &InvalidError{Code: CodeMember, Detail: fmt.Sprintf("order %d outside [0, 2^53)", cp.Order)}
	}
	return &capCall{n: pol.Running, leases: leases, queue: queue, places: places, member: cp.JobID, order: cp.Order, token: token}, nil
}

// prepareFleet prepares the fleet's cap call of a copy.
func (c *RunningCaps) prepareFleet(cp Copy) (prepared, error) {
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
	return prepared{now: now, cap: &capCall{n: c.o.MaxRunning, leases: leases, queue: queue, places: places, member: member,
		order: order, token: token, fleet: true}}, nil
}

package throttle

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"
)

// capCall is the running cap a prepared job is admitted under.
type capCall struct {
	n             int64
	leases, queue string // the cap's lease set and waiting list
	places        string // the places of the jobs it called
	member        string // the job's member of the waiting list
	order         int64  // its place in a tenant's list (Copy.Order)
	token         string
	fleet         bool // the fleet's cap: no rate, no owner
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

// newToken returns an owner token no other run shares: 128 random bits.
func newToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("throttle: owner token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// prepareTenant prepares, through prepare (the Decider's), a copy of a
// tenant whose policy caps its running jobs, to be decided by an admit
// call: it may have no limits. It reports capped=false, preparing
// nothing, when the tenant's policy has no cap in force (none, or in
// shadow mode): a decide call decides the copy.
func (c *RunningCaps) prepareTenant(cp Copy, prepare func(Copy) (prepared, error)) (p prepared, capped bool, err error) {
	pol := c.l.policies.Policy(cp.Tenant)
	if pol.Running == 0 || pol.Shadow {
		return prepared{}, false, nil
	}
	if len(pol.Limits) == 0 && len(cp.Limits) == 0 {
		p, err = prepare(Copy{Request: Request{Tenant: cp.Tenant, JobID: cp.JobID, Cost: cp.Cost, At: cp.At,
			Limits: Limits{{Rate: 1, Period: time.Second, Burst: MaxBurst}}}, Incarnation: cp.Incarnation, Fresh: cp.Fresh})
		p.limitKeys, p.limitArgs, p.limits = nil, nil, nil
	} else {
		p, err = prepare(cp)
	}
	if err != nil {
		return prepared{}, true, err
	}
	if p.cap, err = tenantCap(c.l.keys, cp, pol.Running); err != nil {
		return prepared{}, true, err
	}
	return p, true, nil
}

// tenantCap is the call of the cap of cp's tenant, which caps its running
// jobs at n.
func tenantCap(k keyspace, cp Copy, n int64) (*capCall, error) {
	leases, queue, err := k.capKeys(cp.Tenant)
	if err != nil {
		return nil, err
	}
	places, err := k.capPlaces(cp.Tenant)
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
	return &capCall{n: n, leases: leases, queue: queue, places: places, member: cp.JobID, order: cp.Order, token: token}, nil
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

// capName says which cap a job waits under: "running:N", or "max running:N"
// for the fleet's.
func capName(cp *capCall) string {
	if cp.fleet {
		return "max running:" + strconv.FormatInt(cp.n, 10)
	}
	return RunningTerm + strconv.FormatInt(cp.n, 10)
}

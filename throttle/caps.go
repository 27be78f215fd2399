package throttle

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Defaults of the running caps' timings (CapOptions).
const (
	DefaultLeaseTTL = 30 * time.Second
	DefaultCallTTL  = 5 * time.Second
)

// CapOptions configures the running caps that Copies enforces: a tenant's
// Policy.Running, and MaxRunning over every tenant together.
type CapOptions struct {
	// MaxRunning, when positive, caps how many jobs of all tenants run at
	// once, fleet-wide. 0 means no such cap.
	MaxRunning int64
	// LeaseTTL is how long a lease lives without being renewed: a worker
	// that dies holding leases frees them within LeaseTTL. Renew a running
	// job's leases well within it. Defaults to DefaultLeaseTTL.
	LeaseTTL time.Duration
	// CallTTL is how long a waiting job that was called (Decision.Wake)
	// keeps its place: the time to wake it and bring it back. Defaults to
	// DefaultCallTTL.
	CallTTL time.Duration
	// At, when set, gives the time of Finish, Forfeit, Poke and Renew
	// instead of Redis TIME (a Copy's At gives its decision's): for tests
	// at fixed times.
	At func() time.Time
}

// Lease is one run's place under a running cap, held from its admission
// (Decision.Leases) until it is given back (Copies.Finish) or, if its
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
}

// capCall is the running cap a prepared job is admitted under.
type capCall struct {
	n             int64
	leases, queue string // the cap's lease set and waiting list
	member        string // the job's member of the waiting list
	order         int64  // its place in a tenant's list (Copy.Order)
	token         string
	fleet         bool // the fleet's cap: no rate, no owner
}

// capKeys returns the lease set and waiting list of tenant's cap, or of
// the fleet's when tenant is "" (see fairKey).
func (k keyspace) capKeys(tenant string) (leases, queue string, err error) {
	tag := fleetTag
	if tenant != "" {
		if tag, err = k.tag(tenant); err != nil {
			return "", "", err
		}
	}
	return k.prefix + ":" + tag + ":r", k.prefix + ":" + tag + ":w", nil
}

// fairKey is the fair-queue hash of the fleet's waiting list
// (lua/library.lua, FAIR).
func (k keyspace) fairKey() string { return k.prefix + ":" + fleetTag + ":v" }

// fleetTag is the hash tag of the fleet's cap: no tenant's tag can be it,
// as an encoded tenant is never empty.
const fleetTag = "{~}"

// fleetMember names a tenant's job in the fleet's waiting list.
func (k keyspace) fleetMember(tenant, jobID string) (string, error) {
	tag, err := k.tag(tenant)
	if err != nil {
		return "", err
	}
	return tag[1:len(tag)-1] + "/" + jobID, nil
}

// parseFleetMember reads a member of the fleet's waiting list.
func parseFleetMember(m string) (Waiter, bool) {
	t, id, ok := strings.Cut(m, "/")
	if !ok {
		return Waiter{}, false
	}
	if enc, ok := strings.CutPrefix(t, "~"); ok {
		b, err := base64.RawURLEncoding.DecodeString(enc)
		if err != nil {
			return Waiter{}, false
		}
		t = string(b)
	}
	return Waiter{Tenant: t, JobID: id}, true
}

// newToken returns an owner token no other run shares: 128 random bits.
func newToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("throttle: owner token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// capTTLs are the TTLs admit and lease take, in ms: the lease's, the
// call's, and the sets' and owner records' (long enough for a placeholder
// held past a slot at the horizon).
func (c *Copies) capTTLs(tenant string) (lease, call, record string) {
	rec := c.l.horizon + c.l.policies.Policy(tenant).Limits.longestFill() + c.caps.CallTTL + c.caps.LeaseTTL
	return strconv.FormatInt(c.caps.LeaseTTL.Milliseconds(), 10),
		strconv.FormatInt(c.caps.CallTTL.Milliseconds(), 10),
		strconv.FormatInt(max(1, rec.Milliseconds()), 10)
}

// capOf is the cap in force for tenant's leases ("" for the fleet's): when
// a tenant's policy lost its cap, every waiter may go.
func (c *Copies) capOf(tenant string) int64 {
	n := c.caps.MaxRunning
	if tenant != "" {
		n = c.l.policies.Policy(tenant).Running
	}
	if n <= 0 {
		return MaxRunning
	}
	return n
}

// admitCall builds the function call that decides p under its cap (see
// lua/library.lua, RUNNING CAPS).
func (c *Copies) admitCall(p prepared, tenant string) fcall {
	lt, ct, rt := c.capTTLs(tenant)
	f := fcall{fn: c.l.lib.admit}
	f.keys = []string{p.cap.leases, p.cap.queue}
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

// Lease operations of the lease function.
const (
	leaseRelease = "1"
	leaseRenew   = "2"
	leasePoke    = "3"
)

// leaseCall builds one call of the lease function on the cap of tenant
// ("" for the fleet's).
func (c *Copies) leaseCall(op, tenant string, tokens ...string) (fcall, error) {
	leases, queue, err := c.l.keys.capKeys(tenant)
	if err != nil {
		return fcall{}, err
	}
	lt, ct, rt := c.capTTLs(tenant)
	now := "0"
	if c.caps.At != nil {
		now = strconv.FormatInt(c.caps.At().UnixMicro(), 10)
	}
	args := []any{op, now, strconv.FormatInt(c.capOf(tenant), 10), lt, ct, rt}
	for _, t := range tokens {
		args = append(args, t)
	}
	keys := []string{leases, queue}
	if tenant == "" {
		keys = append(keys, c.l.keys.fairKey())
	}
	return fcall{fn: c.l.lib.lease, keys: keys, args: args}, nil
}

// leaseReply reads the reply of a lease call: its count and the members
// or tokens that follow.
func leaseReply(f fcall) (int64, []any, error) {
	v, err := f.cmd.Result()
	if err != nil {
		_, err = replyInts(f.cmd, f.fn, 4)
		return 0, nil, err
	}
	arr, ok := v.([]any)
	if !ok || len(arr) < 4 {
		return 0, nil, &RedisError{Op: "FCALL " + f.fn, Err: fmt.Errorf("reply %#v, want 4 integers and members", v)}
	}
	var t [4]int64
	for i := range t {
		if t[i], ok = arr[i].(int64); !ok {
			return 0, nil, &RedisError{Op: "FCALL " + f.fn, Err: fmt.Errorf("reply element %d is %T, want an integer", i, arr[i])}
		}
	}
	if err := replyStatus(f.fn, f.keys[0], t[:]); err != nil {
		return 0, nil, err
	}
	return t[1], arr[4:], nil
}

// Finish gives back the leases of a run that ended (compare and delete:
// only the leases its tokens name), in one round trip, and returns the
// waiting jobs whose turn that made: the caller wakes them.
func (c *Copies) Finish(ctx context.Context, leases []Lease) ([]Waiter, error) {
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
func (c *Copies) Forfeit(ctx context.Context, w Waiter, fleet bool) ([]Waiter, error) {
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
func (c *Copies) Poke(ctx context.Context, tenants []string) ([]Waiter, error) {
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

// runLeaseCalls sends calls of the lease function that free room, in one
// pipeline, and returns the waiters they called; tenant(k) is the tenant
// of the k-th call's cap ("" for the fleet's).
func (c *Copies) runLeaseCalls(ctx context.Context, calls []fcall, tenant func(k int) string) ([]Waiter, error) {
	c.l.lib.run(ctx, calls)
	var wake []Waiter
	var first error
	for k, f := range calls {
		_, members, err := leaseReply(f)
		if err != nil {
			first = cmpErr(first, err)
			continue
		}
		wake = append(wake, c.waiters(tenant(k), tenant(k) == "", members)...)
	}
	return wake, first
}

// Renew extends each lease that still counts to LeaseTTL from now, in one
// round trip, and returns those that had expired: their runs lost their
// places, which may be another run's by now.
func (c *Copies) Renew(ctx context.Context, leases []Lease) (lost []Lease, err error) {
	byCap := map[string][]string{}
	var order []string
	for _, ls := range leases {
		if _, ok := byCap[ls.Tenant]; !ok {
			order = append(order, ls.Tenant)
		}
		byCap[ls.Tenant] = append(byCap[ls.Tenant], ls.Token)
	}
	calls := make([]fcall, 0, len(order))
	for _, t := range order {
		f, err := c.leaseCall(leaseRenew, t, byCap[t]...)
		if err != nil {
			return nil, err
		}
		calls = append(calls, f)
	}
	c.l.lib.run(ctx, calls)
	for k, f := range calls {
		_, tokens, e := leaseReply(f)
		if e != nil {
			err = cmpErr(err, e)
			continue
		}
		for _, tk := range tokens {
			if s, ok := tk.(string); ok {
				lost = append(lost, Lease{Tenant: order[k], Token: s})
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

package throttle

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
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

// CapOptions configures the running caps that RunningCaps enforces: a
// tenant's Policy.Running, and MaxRunning over every tenant together.
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

// RunningCaps enforces running caps: a tenant's Policy.Running, and
// CapOptions.MaxRunning over every tenant together. A Decider takes a
// lease of a job's caps in the call that admits it; RunningCaps renews
// and gives back the leases of the jobs that run (Renew, Finish) and hands
// the room they free to the jobs waiting (Poke, Forfeit), which the caller
// wakes. It is safe for concurrent use.
type RunningCaps struct {
	l *Limiter
	o CapOptions
}

// NewRunningCaps returns the running caps of l's tenants, enforced with o.
func NewRunningCaps(l *Limiter, o CapOptions) (*RunningCaps, error) {
	if l == nil {
		return nil, errors.New("throttle: nil limiter")
	}
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
	return &RunningCaps{l: l, o: o}, nil
}

// Lease is one run's place under a running cap, held from its admission
// (Decision.Leases) until it is given back (RunningCaps.Finish) or, if its
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
	places        string // the places of the jobs it called
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

// capPlaces returns the places hash of tenant's cap, or of the fleet's
// when tenant is "": the places in the waiting list of the jobs called
// (lua/caps.lua, RUNNING CAPS).
func (k keyspace) capPlaces(tenant string) (string, error) {
	tag := fleetTag
	if tenant != "" {
		var err error
		if tag, err = k.tag(tenant); err != nil {
			return "", err
		}
	}
	return k.prefix + ":" + tag + ":p", nil
}

// fairKey is the fair-queue hash of the fleet's waiting list
// (lua/caps.lua, FAIR).
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
func (c *RunningCaps) capTTLs(tenant string) (lease, call, record string) {
	rec := c.l.horizon + c.l.policies.Policy(tenant).Limits.longestFill() + c.o.CallTTL + c.o.LeaseTTL
	return strconv.FormatInt(c.o.LeaseTTL.Milliseconds(), 10),
		strconv.FormatInt(c.o.CallTTL.Milliseconds(), 10),
		strconv.FormatInt(max(1, rec.Milliseconds()), 10)
}

// capOf is the cap in force for tenant's leases ("" for the fleet's): when
// a tenant's policy lost its cap, every waiter may go.
func (c *RunningCaps) capOf(tenant string) int64 {
	n := c.o.MaxRunning
	if tenant != "" {
		n = c.l.policies.Policy(tenant).Running
	}
	if n <= 0 {
		return MaxRunning
	}
	return n
}

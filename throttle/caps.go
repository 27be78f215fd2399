package throttle

import (
	"errors"
	"fmt"
	"strconv"
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

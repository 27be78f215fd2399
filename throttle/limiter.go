// Package throttle decides, atomically in Redis, whether a tenant's job may
// run now or must come back later, over one or more token buckets per tenant.
//
// A Limiter gives the same decisions as golang.org/x/time/rate's Limiter
// called with ReserveN at the same times, but its state lives in Redis, so
// any number of workers share one quota. A job that must wait gets a
// reserved slot: it is charged once, told exactly when to come back, and
// admitted without a second charge when it does.
//
// Being limited is a Decision, not an error. Errors are either invalid input
// (errors.Is(err, ErrInvalid)) or a Redis failure (errors.Is(err, ErrRedis)).
//
// Jobs that may exist as several messages (an original and the copies made
// by moving it) are decided through a Decider, which lets only one of them
// run.
//
// The engine runs as a Redis Functions library (package lua), so it
// needs Redis 7.0 or later. Load it at start (Limiter.Load); a call that
// finds it missing (after a restart without persistence, FUNCTION FLUSH, a
// new master) loads it again and is sent again.
package throttle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// MaxHorizon is the longest reservation horizon a Limiter accepts.
const MaxHorizon = 30 * 24 * time.Hour

// Options configures a Limiter.
type Options struct {
	// Policies gives each tenant its limits and whether they are enforced
	// or shadowed: a Rules value, or a source that changes while the
	// Limiter runs. Required.
	Policies Policies
	// Horizon is the furthest ahead a slot may be reserved for a job that
	// must wait. A job whose slot would lie further is told to come back
	// after Horizon, uncharged. 0 means never reserve: every call then
	// behaves like x/time/rate's AllowN. Defaults to 0.
	Horizon time.Duration
	// Prefix starts every Redis key. Defaults to DefaultPrefix.
	Prefix string
	// TimeZone is the time zone of the calendar windows that name none
	// (window:N/UNIT). Defaults to UTC.
	TimeZone *time.Location
}

// Limiter decides jobs against per-tenant limits stored in Redis. It is safe
// for concurrent use by many goroutines, and any number of Limiters (in any
// number of processes) sharing a Redis and a Prefix share one quota.
//
// Time comes from Redis TIME unless a Request sets At: every worker then
// reads one clock, so skewed worker clocks can neither over-admit nor delay.
type Limiter struct {
	lib         *library
	crossTenant bool // one function call may hold several tenants' jobs
	keys        keyspace
	horizon     time.Duration
	horizonArg  any // horizon in µs, as the function reads it (boxed once)
	policies    Policies
	// rendered holds the key suffixes and function arguments of every limit
	// met so far, built once: they are the same for every job.
	rendered sync.Map // Limit → *renderedLimit
	loc      *time.Location
	zones    sync.Map // zone name → *time.Location, loaded once
}

// New returns a Limiter over rdb. It does not talk to Redis: call Load at
// start.
func New(rdb Client, opts Options) (*Limiter, error) {
	if rdb == nil {
		return nil, errors.New("throttle: nil redis client")
	}
	if opts.Policies == nil {
		return nil, errors.New("throttle: no policies")
	}
	if r, ok := opts.Policies.(Rules); ok {
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("throttle: %w", err)
		}
	}
	if opts.Horizon < 0 || opts.Horizon > MaxHorizon {
		return nil, fmt.Errorf("throttle: horizon %s out of range [0, %s]", opts.Horizon, MaxHorizon)
	}
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if strings.ContainsAny(prefix, "{} \t\r\n") {
		return nil, fmt.Errorf("throttle: prefix %q must not contain braces or spaces", prefix)
	}
	// A single server takes keys of any slot in one call; a Cluster or Ring
	// routes by key, so there a call holds one tenant's jobs.
	_, single := rdb.(*redis.Client)
	return &Limiter{
		lib:         newLibrary(rdb),
		crossTenant: single,
		keys:        keyspace{prefix: prefix},
		horizon:     opts.Horizon,
		horizonArg:  strconv.FormatInt(opts.Horizon.Microseconds(), 10),
		policies:    opts.Policies,
		loc:         cmp.Or(opts.TimeZone, time.UTC),
	}, nil
}

// Load loads the engine's functions into Redis (FUNCTION LOAD REPLACE), on
// every master of a Redis Cluster and every shard of a Ring. Call it at
// start. A Redis that is down then is no reason to stop: a call that finds
// the functions missing loads them itself.
func (l *Limiter) Load(ctx context.Context) error { return l.lib.load(ctx) }

// Allow is shorthand for AllowN(ctx, tenant, 1).
func (l *Limiter) Allow(ctx context.Context, tenant string) (Decision, error) {
	return l.AllowN(ctx, tenant, 1)
}

// AllowN reports whether a job of the given cost may run now, charging it
// only if so: Admitted, or Limited with the Wait until it may fit. It never
// reserves a slot.
func (l *Limiter) AllowN(ctx context.Context, tenant string, cost int64) (Decision, error) {
	return l.Decide(ctx, Request{Tenant: tenant, Cost: cost})
}

// Reserve decides one job: Admitted, Reserved with the Wait until the slot
// it now holds, or (past the horizon) Limited with the Wait until it may
// try again.
func (l *Limiter) Reserve(ctx context.Context, tenant, jobID string, cost int64) (Decision, error) {
	return l.Decide(ctx, Request{Tenant: tenant, JobID: jobID, Cost: cost})
}

// Decide decides one request in one function call (three at most for a
// tenant with credits: see DecideBatch).
func (l *Limiter) Decide(ctx context.Context, req Request) (Decision, error) {
	if l.policies.Policy(req.Tenant).Credits != CreditsOff {
		r := l.decideWithCredits(ctx, []Request{req})
		return r[0].Decision, r[0].Err
	}
	p, err := l.prepare(req)
	if err != nil {
		return Decision{}, err
	}
	return l.decideOne(ctx, p)
}

// DecideBatch decides many requests in one pipelined round trip (two after
// Redis lost the functions), with the same outcome as deciding them one by
// one in the order given. Requests that share their clock and whether they
// carry a job id are decided together, up to 64 per function call, which
// costs Redis far less than one call each: on a single Redis server any
// tenants may share a call; on a Redis Cluster (or Ring) a call holds one
// tenant's requests, so it touches only that tenant's slot, and the
// pipeline sends each call to its node. A request that is invalid (or whose
// key holds another Redis type) fails alone: the others of its call are
// decided as if it were not there. The results match reqs by index.
//
// A request of a tenant whose policy draws on credits (Policy.Credits)
// is first charged its cost against the tenant's balance, in one more
// round trip before the others: one the balance does not cover is
// Unfunded; one charged that then does not run (Limited) gets its credits
// back in a last round trip. A request with a JobID is charged once
// however often it is decided; one of a tenant with credits and no limits
// is admitted once charged.
func (l *Limiter) DecideBatch(ctx context.Context, reqs []Request) []Result {
	for _, req := range reqs {
		if l.policies.Policy(req.Tenant).Credits != CreditsOff {
			return l.decideWithCredits(ctx, reqs)
		}
	}
	return l.decideBatch(ctx, len(reqs), func(i int) (prepared, error) { return l.prepare(reqs[i]) })
}

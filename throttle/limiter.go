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
// by moving it) are decided through Copies, which lets only one of them run.
//
// The engine runs as a Redis Functions library (lua/library.lua), so it
// needs Redis 7.0 or later. Load it at start (Limiter.Load); a call that
// finds it missing (after a restart without persistence, FUNCTION FLUSH, a
// new master) loads it again and is sent again.
package throttle

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// MaxHorizon is the longest reservation horizon a Limiter accepts.
const MaxHorizon = 30 * 24 * time.Hour

// Options configures a Limiter.
type Options struct {
	// Rules gives each tenant its limits. Required.
	Rules Rules
	// Horizon is the furthest ahead a slot may be reserved for a job that
	// must wait. A job whose slot would lie further is told to come back
	// after Horizon, uncharged. 0 means never reserve: every call then
	// behaves like x/time/rate's AllowN. Defaults to 0.
	Horizon time.Duration
	// Prefix starts every Redis key. Defaults to DefaultPrefix.
	Prefix string
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
	rules       Rules
	// rendered holds the key suffix and function arguments of every limit
	// in rules, built once: they are the same for every job.
	rendered map[Limit]*renderedLimit
}

// renderedLimit is a limit as its state key and the function spell it.
type renderedLimit struct {
	keySuffix string // ":l:RATE:PERIOD", after the tenant's tag
	args      [3]any // rate, period µs, burst
}

// render spells lim for keys and the function.
func render(lim Limit) *renderedLimit {
	return &renderedLimit{
		keySuffix: limitKeySuffix(lim),
		args: [3]any{
			strconv.FormatInt(lim.Rate, 10),
			strconv.FormatInt(lim.periodMicros(), 10),
			strconv.FormatInt(lim.Burst, 10),
		},
	}
}

// New returns a Limiter over rdb. It does not talk to Redis: call Load at
// start.
func New(rdb Client, opts Options) (*Limiter, error) {
	if rdb == nil {
		return nil, errors.New("throttle: nil redis client")
	}
	if err := opts.Rules.Validate(); err != nil {
		return nil, fmt.Errorf("throttle: %w", err)
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
	rendered := map[Limit]*renderedLimit{}
	for _, ls := range append([]Limits{opts.Rules.Default}, slices.Collect(maps.Values(opts.Rules.Tenants))...) {
		for _, lim := range ls {
			rendered[lim] = render(lim)
		}
	}
	return &Limiter{
		lib:         newLibrary(rdb),
		crossTenant: single,
		keys:        keyspace{prefix: prefix},
		horizon:     opts.Horizon,
		horizonArg:  strconv.FormatInt(opts.Horizon.Microseconds(), 10),
		rules:       opts.Rules,
		rendered:    rendered,
	}, nil
}

// Load loads the engine's functions into Redis (FUNCTION LOAD REPLACE), on
// every master of a Redis Cluster and every shard of a Ring. Call it at
// start. A Redis that is down then is no reason to stop: a call that finds
// the functions missing loads them itself.
func (l *Limiter) Load(ctx context.Context) error { return l.lib.load(ctx) }

// Request is one job to decide.
type Request struct {
	// Tenant owns the job. Required; at most MaxTenantLen bytes.
	Tenant string
	// JobID names the job for its reservation, e.g. its stream sequence.
	// It must be unique among the tenant's jobs that may wait at once.
	// Empty means no reservation: a job that must wait is not charged.
	JobID string
	// Cost is the number of tokens the job takes. Defaults to 1.
	Cost int64
	// At is the time of the decision. Defaults to Redis TIME. Set it only
	// for deterministic tests or replays.
	At time.Time
	// Limits overrides the Rules for this one request when non-empty.
	Limits Limits
}

// Outcome is what a decision tells the job to do.
type Outcome int

// The outcomes of a decision.
const (
	// Admitted: run the job now. It was charged, or it came back for the
	// slot it held (charged then).
	Admitted Outcome = iota + 1
	// Reserved: wait. A slot is held for the job at Wait from now, and it
	// was charged for it: coming back after Wait, it is admitted without a
	// second charge.
	Reserved
	// Limited: wait. Nothing was charged (the job has no id, or its slot
	// would lie past the horizon): try again after Wait.
	Limited
	// Duplicate: another incarnation of the job ran (Decision.Owner names
	// it); this one must not. Only Copies decides this.
	Duplicate
)

// String names o.
func (o Outcome) String() string {
	switch o {
	case Admitted:
		return "admitted"
	case Reserved:
		return "reserved"
	case Limited:
		return "limited"
	case Duplicate:
		return "duplicate"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Decision is the outcome of one request.
type Decision struct {
	// Outcome says what the job must do.
	Outcome Outcome
	// Wait is how long the job must wait before coming back: 0 when
	// Admitted or Duplicate. It is rounded up to the microsecond, never down.
	Wait time.Duration
	// Remaining is the number of whole tokens left in the tightest limit
	// after the decision. It is 0 for a Reserved job, for a Duplicate, and
	// for a job admitted through the slot it held, whose decision does not
	// read the buckets.
	Remaining int64
	// Owner is the incarnation that ran, when Duplicate.
	Owner int64
}

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

// Decide decides one request in one function call.
func (l *Limiter) Decide(ctx context.Context, req Request) (Decision, error) {
	p, err := l.prepare(req)
	if err != nil {
		return Decision{}, err
	}
	return l.decideOne(ctx, p)
}

// decideOne decides one prepared job in one function call.
func (l *Limiter) decideOne(ctx context.Context, p prepared) (Decision, error) {
	c := call{parts: []prepared{p}, reqs: []int{0}}
	l.build(&c)
	calls := []fcall{c.fcall}
	l.lib.run(ctx, calls)
	c.fcall = calls[0]
	var d [1]Result
	c.results(d[:])
	return d[0].Decision, d[0].Err
}

// Result is the outcome of one request of a batch.
type Result struct {
	Decision
	// Err is nil, or an error matching ErrInvalid or ErrRedis.
	Err error
}

// maxJobsPerCall caps the jobs one function call decides (the function's
// own limit is 256).
const maxJobsPerCall = 64

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
func (l *Limiter) DecideBatch(ctx context.Context, reqs []Request) []Result {
	return l.decideBatch(ctx, len(reqs), func(i int) (prepared, error) { return l.prepare(reqs[i]) })
}

// decideBatch decides n jobs prepared by prep, as DecideBatch.
func (l *Limiter) decideBatch(ctx context.Context, n int, prep func(i int) (prepared, error)) []Result {
	results := make([]Result, n)
	var calls []call
	// open maps a group key to the call its next jobs may join; last maps a
	// tenant to the call of its latest request. A request joins an open call
	// only if its tenant's earlier requests are in that call or before it,
	// so every request still sees what all requests before it did.
	open := map[groupKey]int{}
	last := map[string]int{}
	for i := range n {
		p, err := prep(i)
		if err != nil {
			results[i].Err = err
			continue
		}
		key := groupKey{now: p.now, owner: p.ownerKey != "", job: p.resvKey != ""}
		if !l.crossTenant {
			key.tag = p.tag
		}
		g, ok := open[key]
		prev, seen := last[p.tag]
		if ok && len(calls[g].parts) < maxJobsPerCall && (!seen || prev <= g) {
			calls[g].parts = append(calls[g].parts, p)
			calls[g].reqs = append(calls[g].reqs, i)
			last[p.tag] = g
			continue
		}
		open[key] = len(calls)
		last[p.tag] = len(calls)
		calls = append(calls, call{parts: []prepared{p}, reqs: []int{i}})
	}
	if len(calls) == 0 {
		return results
	}
	fcalls := make([]fcall, len(calls))
	for k := range calls {
		l.build(&calls[k])
		fcalls[k] = calls[k].fcall
	}
	l.lib.run(ctx, fcalls)
	for k := range calls {
		calls[k].fcall = fcalls[k]
		calls[k].results(results)
	}
	return results
}

// groupKey is what the jobs of one function call share: the clock, whether
// they have job keys and owner keys, and on a cluster the tenant.
type groupKey struct {
	tag        string
	now        string
	owner, job bool
}

// prepared is one validated request, in the pieces a function call is
// built of.
type prepared struct {
	tag         string // the tenant's hash tag
	limitKeys   []string
	limitArgs   []any // rate, period, burst of each limit; with one limit, the Limiter's own (read only)
	now, cost   string
	resvKey     string // reservation key, or ""
	ownerKey    string // owner key, or "" (Copies only)
	incarnation string // with ownerKey
	fresh       bool
}

// call is one function call deciding one or more requests.
type call struct {
	parts []prepared // the requests it decides
	reqs  []int      // their indices in the batch
	fcall
}

// arg is s as a function argument. Putting a string in an interface
// allocates a copy of its header, except for a constant: the values most
// jobs have come from constants.
func arg(s string) any {
	switch s {
	case "0":
		return "0"
	case "1":
		return "1"
	}
	return s
}

// build fills the function, keys and arguments of c from its parts (see
// lua/library.lua, decide): the short form for one job under one limit
// without a job id, else the general form, in which a job with the limits of
// the job before sends 0 for them.
func (l *Limiter) build(c *call) {
	c.fn = l.lib.decide
	first := c.parts[0]
	if len(c.parts) == 1 && first.resvKey == "" && len(first.limitKeys) == 1 {
		c.keys = first.limitKeys
		c.args = append(append(make([]any, 0, 5), arg(first.now), arg(first.cost)), first.limitArgs...)
		return
	}
	perJob := len(first.limitKeys) + 2
	c.keys = make([]string, 0, len(c.parts)*perJob)
	c.args = make([]any, 0, 2+len(c.parts)*4+len(first.limitArgs))
	c.args = append(c.args, arg(first.now), l.horizonArg)
	for k, p := range c.parts {
		c.keys = append(c.keys, p.limitKeys...)
		if p.resvKey != "" {
			c.keys = append(c.keys, p.resvKey)
		}
		if p.ownerKey != "" {
			c.keys = append(c.keys, p.ownerKey)
		}
		inc, fresh := any("0"), any("0")
		if p.incarnation != "" {
			inc = arg(p.incarnation)
		}
		if p.fresh {
			fresh = "1"
		}
		c.args = append(c.args, arg(p.cost), inc, fresh)
		if k > 0 && sameLimits(p.limitArgs, c.parts[k-1].limitArgs) {
			c.args = append(c.args, "0")
			continue
		}
		c.args = append(c.args, arg(strconv.Itoa(len(p.limitKeys))))
		c.args = append(c.args, p.limitArgs...)
	}
}

// sameLimits reports whether two jobs' rendered limits (rate, period and
// burst of each) are the same.
func sameLimits(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// results reads the call's reply into results, one tuple of 4 integers per
// request it decides.
func (c *call) results(results []Result) {
	v, err := replyInts(c.cmd, c.fn, 4*len(c.reqs))
	for k, i := range c.reqs {
		if err != nil {
			results[i].Err = err
			continue
		}
		results[i].Decision, results[i].Err = c.tuple(k, v[4*k:4*k+4])
	}
}

// Reply statuses of decide; see lua/library.lua.
const (
	statusAdmitted  = 1
	statusLimited   = 2
	statusInvalid   = 3
	statusDuplicate = 4
	statusWrongType = 5
)

// tuple reads the reply tuple of the call's k-th job.
func (c *call) tuple(k int, t []int64) (Decision, error) {
	switch t[0] {
	case statusAdmitted:
		return Decision{Outcome: Admitted, Remaining: t[2]}, nil
	case statusLimited:
		d := Decision{Outcome: Limited, Wait: time.Duration(t[1]) * time.Microsecond, Remaining: t[2]}
		if t[3] == 1 {
			d.Outcome = Reserved
		}
		return d, nil
	case statusInvalid:
		return Decision{}, &InvalidError{Code: Code(t[1]), Index: int(t[2])}
	case statusDuplicate:
		return Decision{Outcome: Duplicate, Owner: t[1]}, nil
	case statusWrongType:
		return Decision{}, wrongType(c.fcall, t[1])
	}
	return Decision{}, &RedisError{Op: "FCALL " + c.fn, Err: fmt.Errorf("unexpected reply %v for job %d", t, k)}
}

// wrongType is the error of a function call that found KEYS[pos] holding
// another Redis type than a string.
func wrongType(c fcall, pos int64) error {
	key := "?"
	if pos >= 1 && int(pos) <= len(c.keys) {
		key = c.keys[pos-1]
	}
	return &RedisError{Op: "FCALL " + c.fn, Err: fmt.Errorf("WRONGTYPE key %s (KEYS[%d]) holds another type than a string", key, pos)}
}

// prepare validates req and builds the pieces of its function call.
// Everything the function would refuse is refused here first, without a
// round trip.
func (l *Limiter) prepare(req Request) (prepared, error) {
	tag, err := l.keys.tag(req.Tenant)
	if err != nil {
		return prepared{}, err
	}
	limits := req.Limits
	if len(limits) == 0 {
		limits = l.rules.For(req.Tenant) // validated by New
	} else if err := limits.Validate(); err != nil {
		return prepared{}, &InvalidError{Code: CodeLimits, Detail: err.Error()}
	}
	cost := req.Cost
	if cost == 0 {
		cost = 1
	}
	if cost < 1 || cost > MaxBurst {
		return prepared{}, &InvalidError{Code: CodeCost, Detail: fmt.Sprintf("cost %d out of range [1, %d]", cost, MaxBurst)}
	}
	if min := limits.MinBurst(); cost > min {
		return prepared{}, &InvalidError{Code: CodeCostOverBurst, Detail: fmt.Sprintf("cost %d, smallest burst %d", cost, min)}
	}
	var now int64
	if !req.At.IsZero() {
		now = req.At.UnixMicro()
		if now < 1 || now >= maxExact {
			return prepared{}, &InvalidError{Code: CodeNow, Detail: fmt.Sprintf("time %s out of range", req.At)}
		}
	}
	p := prepared{
		tag:       tag,
		now:       strconv.FormatInt(now, 10),
		cost:      strconv.FormatInt(cost, 10),
		limitKeys: make([]string, 0, len(limits)),
	}
	for _, lim := range limits {
		r, ok := l.rendered[lim]
		if !ok {
			r = render(lim)
		}
		p.limitKeys = append(p.limitKeys, l.keys.prefix+":"+tag+r.keySuffix)
		if len(limits) == 1 {
			p.limitArgs = r.args[:] // shared, never written
			break
		}
		p.limitArgs = append(p.limitArgs, r.args[:]...)
	}
	if req.JobID != "" {
		if err := validJobID(req.JobID); err != nil {
			return prepared{}, err
		}
		p.resvKey = l.keys.reservation(tag, req.JobID)
	}
	return p, nil
}

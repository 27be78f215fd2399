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

	"github.com/throttler/throttler/lua"
)

// Client is the part of a go-redis client the Limiter needs. *redis.Client,
// *redis.ClusterClient and *redis.Ring all satisfy it.
type Client interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

// MaxHorizon is the longest reservation horizon a Limiter accepts.
const MaxHorizon = 30 * 24 * time.Hour

// Script reply statuses; see lua/throttle.lua.
const (
	statusAllowed   = 1
	statusLimited   = 2
	statusInvalid   = 3
	statusDuplicate = 4
)

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
	rdb         Client
	crossTenant bool // one script call may hold several tenants' jobs
	script      *redis.Script
	ownerScript *redis.Script // lua/owner.lua, for ClaimOwner and ReleaseOwner
	keys        keyspace
	horizon     time.Duration
	horizonArg  any // horizon in µs, as the script reads it (boxed once)
	rules       Rules
	// rendered holds the key suffix and script arguments of every limit
	// in rules, built once: they are the same for every job.
	rendered map[Limit]*renderedLimit
}

// renderedLimit is a limit as its state key and the script spell it.
type renderedLimit struct {
	keySuffix string // ":l:RATE:PERIOD", after the tenant's tag
	args      [3]any // rate, period µs, burst
}

// render spells lim for keys and the script.
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

// New returns a Limiter over rdb.
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
		rdb:         rdb,
		crossTenant: single,
		script:      redis.NewScript(lua.Throttle),
		ownerScript: redis.NewScript(lua.Owner),
		keys:        keyspace{prefix: prefix},
		horizon:     opts.Horizon,
		horizonArg:  strconv.FormatInt(opts.Horizon.Microseconds(), 10),
		rules:       opts.Rules,
		rendered:    rendered,
	}, nil
}

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
	// TrackOwner guards a job that may be moved off its queue (re-published
	// as a copy, the original acked) against running twice when the move is
	// interrupted: the incarnation admitted becomes the owner (all but a
	// Fresh original, which has no copy), and any other incarnation is then
	// a Duplicate.
	// An owner that is decided again and deferred (it did not run: its
	// handler failed, say) gives ownership up, so that the copy its move
	// makes may run. Needs JobID.
	TrackOwner bool
	// Incarnation tells the incarnations of a moved job apart: a number
	// unique to the message carrying it, in [0, 2^53), such as its stream
	// sequence. The original and every copy differ, and so do two copies
	// of one move (stored twice when the move was redone after its dedup
	// window): only one of them runs.
	Incarnation int64
	// Fresh says the job was never decided before (a queue's first
	// delivery of a message), so it holds no reservation: the script then
	// does not read one, which saves a Redis read per job. Set it only
	// when that is certain: a fresh job that does hold a slot is charged
	// again. Needs JobID; the owner record is read whether or not.
	Fresh bool
}

// Decision is the outcome of one request.
type Decision struct {
	// Allowed is true when the job may run now.
	Allowed bool
	// Wait is how long the job must wait before coming back; 0 when
	// Allowed. It is rounded up to the microsecond, never down.
	Wait time.Duration
	// Remaining is the number of whole tokens left in the tightest limit
	// after the decision. It is 0 for a job admitted through the slot it
	// held, whose decision does not read the buckets.
	Remaining int64
	// Reserved is true when a slot is held for the job: a limited job was
	// charged and holds the slot at now+Wait, or an allowed job has just
	// used the slot it held.
	Reserved bool
	// Duplicate is true when another incarnation of a tracked job (see
	// Request.TrackOwner) was admitted already: this one must not run.
	// Allowed is false and nothing was charged.
	Duplicate bool
	// Owner is the incarnation that was admitted, when Duplicate.
	Owner int64
}

// Allow is shorthand for AllowN(ctx, tenant, 1).
func (l *Limiter) Allow(ctx context.Context, tenant string) (Decision, error) {
	return l.AllowN(ctx, tenant, 1)
}

// AllowN reports whether a job of the given cost may run now, charging it
// only if so. It never reserves a slot.
func (l *Limiter) AllowN(ctx context.Context, tenant string, cost int64) (Decision, error) {
	return l.Decide(ctx, Request{Tenant: tenant, Cost: cost})
}

// Reserve decides one job: Allowed, or limited with the Wait until the slot
// it now holds (or, past the horizon, until it may try again).
func (l *Limiter) Reserve(ctx context.Context, tenant, jobID string, cost int64) (Decision, error) {
	return l.Decide(ctx, Request{Tenant: tenant, JobID: jobID, Cost: cost})
}

// Decide decides one request in one script call (EVALSHA, falling back to
// EVAL when Redis has lost the script).
func (l *Limiter) Decide(ctx context.Context, req Request) (Decision, error) {
	p, err := l.prepare(req)
	if err != nil {
		return Decision{}, err
	}
	c := singleCall(p)
	v, err := l.script.Run(ctx, l.rdb, c.keys, c.args...).Result()
	if err != nil {
		return Decision{}, &RedisError{Op: "throttle script", Err: err}
	}
	return parseReply(v)
}

// Result is the outcome of one request of a batch.
type Result struct {
	Decision
	// Err is nil, or an error matching ErrInvalid or ErrRedis.
	Err error
}

// maxJobsPerCall caps the jobs one script call decides (the script's own
// limit is 256).
const maxJobsPerCall = 64

// DecideBatch decides many requests in one pipelined round trip (two after
// Redis lost the script), with the same outcome as deciding them one by one
// in the order given. Requests that share their clock, owner tracking and
// whether they carry a job id are decided together, up to 64 per script
// call, which costs Redis far less than one call each: on a single Redis
// server any tenants may share a call; on a Redis Cluster (or Ring) a call
// holds one tenant's requests, so it touches only that tenant's slot, and
// the pipeline sends each call to its node. The results match reqs by index.
func (l *Limiter) DecideBatch(ctx context.Context, reqs []Request) []Result {
	results := make([]Result, len(reqs))
	var calls []call
	// open maps a group key to the call its next jobs may join; last maps a
	// tenant to the call of its latest request. A request joins an open call
	// only if its tenant's earlier requests are in that call or before it,
	// so every request still sees what all requests before it did.
	open := map[groupKey]int{}
	last := map[string]int{}
	for i, req := range reqs {
		p, err := l.prepare(req)
		if err != nil {
			results[i].Err = err
			continue
		}
		key := groupKey{now: p.now, owner: p.ownerKey != "", job: p.jobKey != ""}
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
	for k := range calls {
		calls[k].build()
	}
	l.run(ctx, calls)

	var fallback []call
	for _, c := range calls {
		decs, err := c.results()
		if err != nil && len(c.reqs) > 1 && (errors.Is(err, ErrInvalid) || isReplyError(err)) {
			// One job's stored state is bad (malformed, or a key of the
			// wrong type): decide each job alone, so the others do not fail
			// with it.
			for k, p := range c.parts {
				one := singleCall(p)
				one.reqs = []int{c.reqs[k]}
				fallback = append(fallback, one)
			}
			continue
		}
		for k, i := range c.reqs {
			if err != nil {
				results[i].Err = err
			} else {
				results[i].Decision = decs[k]
			}
		}
	}
	if len(fallback) > 0 {
		l.run(ctx, fallback)
		for _, c := range fallback {
			decs, err := c.results()
			if err != nil {
				results[c.reqs[0]].Err = err
			} else {
				results[c.reqs[0]].Decision = decs[0]
			}
		}
	}
	return results
}

// run sends calls in one pipeline, then re-sends with the full source those
// that failed with NOSCRIPT (after a restart, failover or SCRIPT FLUSH):
// they did not run, so sending them again is safe, and it loads the script
// for the next batch.
func (l *Limiter) run(ctx context.Context, calls []call) {
	if len(calls) == 0 {
		return
	}
	pipe := l.rdb.Pipeline()
	for k := range calls {
		calls[k].cmd = pipe.EvalSha(ctx, l.script.Hash(), calls[k].keys, calls[k].args...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	var retry redis.Pipeliner
	for k := range calls {
		if isNoScript(calls[k].cmd.Err()) {
			if retry == nil {
				retry = l.rdb.Pipeline()
			}
			calls[k].cmd = retry.Eval(ctx, lua.Throttle, calls[k].keys, calls[k].args...)
		}
	}
	if retry != nil {
		_, _ = retry.Exec(ctx)
	}
}

// isReplyError reports whether err is an error reply of the Redis server
// (WRONGTYPE and the like), as opposed to a connection failure.
func isReplyError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}

// isNoScript reports whether err is Redis' NOSCRIPT reply.
func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// prepared is one validated request, in the pieces a script call is built of.
// arg is s as a script argument. Putting a string in an interface allocates
// a copy of its header, except for a constant: the values most jobs have
// come from constants.
func arg(s string) any {
	switch s {
	case "0":
		return "0"
	case "1":
		return "1"
	}
	return s
}

// incarnationArg is the job's incarnation as the script reads it.
func (p prepared) incarnationArg() string {
	if p.incarnation == "" {
		return "0"
	}
	return p.incarnation
}

// groupKey is what the jobs of one script call share: the clock, whether
// they track owners and have job keys, and on a cluster the tenant.
type groupKey struct {
	tag        string
	now        string
	owner, job bool
}

type prepared struct {
	tag         string // the tenant's hash tag
	limitKeys   []string
	limitArgs   []any // rate, period, burst of each limit; with one limit, the Limiter's own (read only)
	now, cost   string
	horizon     any    // Limiter.horizonArg
	jobKey      string // reservation key, or ""
	ownerKey    string // owner key, or ""
	incarnation string
	fresh       bool
}

// call is one script invocation deciding one or more requests.
type call struct {
	parts []prepared // the requests, for a call built from a group
	reqs  []int      // indices in the batch of the requests it decides
	keys  []string
	args  []any
	cmd   *redis.Cmd
}

// singleCall builds the call deciding one request.
func singleCall(p prepared) call {
	if len(p.limitKeys) == 1 && p.jobKey == "" && p.ownerKey == "" && !p.fresh {
		// The script's short form: no job id, so no horizon, and one limit.
		args := append(make([]any, 0, 5), arg(p.now), arg(p.cost))
		return call{parts: []prepared{p}, keys: p.limitKeys, args: append(args, p.limitArgs...)}
	}
	keys := append(make([]string, 0, len(p.limitKeys)+2), p.limitKeys...)
	args := make([]any, 0, 6+len(p.limitArgs))
	args = append(args, arg(p.now), arg(p.cost), p.horizon, arg(strconv.Itoa(len(p.limitKeys))))
	args = append(args, p.limitArgs...)
	if p.jobKey != "" {
		keys = append(keys, p.jobKey)
	}
	if p.ownerKey != "" {
		keys = append(keys, p.ownerKey)
	}
	if p.ownerKey != "" || p.fresh {
		args = append(args, arg(p.incarnationArg()))
	}
	if p.fresh {
		args = append(args, "1")
	}
	return call{parts: []prepared{p}, keys: keys, args: args}
}

// build fills keys and args of a call from its parts: one part gives the
// single-job form of the script, several the multi-job form, in which every
// job brings its own limits and keys.
func (c *call) build() {
	if len(c.parts) == 1 {
		one := singleCall(c.parts[0])
		c.keys, c.args = one.keys, one.args
		return
	}
	first := c.parts[0]
	c.keys = make([]string, 0, len(c.parts)*(len(first.limitKeys)+2))
	c.args = make([]any, 0, len(c.parts)*(3+len(first.limitArgs))+2)
	for k, p := range c.parts {
		c.keys = append(c.keys, p.limitKeys...)
		if p.jobKey != "" {
			c.keys = append(c.keys, p.jobKey)
		}
		if p.ownerKey != "" {
			c.keys = append(c.keys, p.ownerKey)
		}
		var fresh any = "0"
		if p.fresh {
			fresh = "1"
		}
		if k == 0 {
			c.args = append(c.args, arg(p.now), arg(p.cost), p.horizon, arg(strconv.Itoa(len(p.limitKeys))))
			c.args = append(c.args, p.limitArgs...)
			c.args = append(c.args, arg(p.incarnationArg()), fresh)
			continue
		}
		if sameLimits(p.limitArgs, c.parts[k-1].limitArgs) {
			// The script reads 0 limits as those of the job before.
			c.args = append(c.args, arg(p.cost), arg(p.incarnationArg()), fresh, "0")
			continue
		}
		c.args = append(c.args, arg(p.cost), arg(p.incarnationArg()), fresh, arg(strconv.Itoa(len(p.limitKeys))))
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

// results reads the call's reply: one Decision per request it decides.
func (c *call) results() ([]Decision, error) {
	v, err := c.cmd.Result()
	if err != nil {
		return nil, &RedisError{Op: "throttle script", Err: err}
	}
	if len(c.reqs) == 1 {
		d, err := parseReply(v)
		return []Decision{d}, err
	}
	arr, ok := v.([]any)
	if ok && len(arr) == 3 {
		_, err := parseReply(v) // a single INVALID tuple for the whole call
		return nil, err
	}
	if !ok || len(arr) != 4*len(c.reqs) {
		return nil, &RedisError{Op: "throttle script", Err: fmt.Errorf("unexpected reply of %d elements for %d jobs", len(arr), len(c.reqs))}
	}
	decs := make([]Decision, len(c.reqs))
	for k := range decs {
		if decs[k], err = parseTuple(arr[4*k : 4*k+4]); err != nil {
			return nil, err
		}
	}
	return decs, nil
}

// prepare validates req and builds the pieces of its script call.
// Everything the script would refuse is refused here first, without a
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
		horizon:   l.horizonArg,
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
		p.jobKey = l.keys.reservation(tag, req.JobID)
	}
	if req.TrackOwner {
		if req.JobID == "" {
			return prepared{}, &InvalidError{Code: CodeJobID, Detail: "owner tracking needs a job id"}
		}
		if req.Incarnation < 0 || req.Incarnation >= maxExact {
			return prepared{}, &InvalidError{Code: CodeIncarnation, Detail: fmt.Sprintf("incarnation %d out of range", req.Incarnation)}
		}
		p.ownerKey = l.keys.owner(tag, req.JobID)
		p.incarnation = strconv.FormatInt(req.Incarnation, 10)
	}
	if req.Fresh {
		if req.JobID == "" {
			return prepared{}, &InvalidError{Code: CodeJobID, Detail: "a fresh job needs a job id"}
		}
		p.fresh = true
	}
	return p, nil
}

// parseReply reads the script's reply, checking every element's type.
func parseReply(v any) (Decision, error) {
	arr, ok := v.([]any)
	if !ok {
		return Decision{}, &RedisError{Op: "throttle script", Err: fmt.Errorf("unexpected reply %#v", v)}
	}
	return parseTuple(arr)
}

// parseTuple reads one tuple of the script's reply.
func parseTuple(arr []any) (Decision, error) {
	if len(arr) < 3 || len(arr) > 4 {
		return Decision{}, &RedisError{Op: "throttle script", Err: fmt.Errorf("unexpected reply of %d elements", len(arr))}
	}
	var all [4]int64
	nums := all[:len(arr)]
	for i, e := range arr {
		n, ok := e.(int64)
		if !ok {
			return Decision{}, &RedisError{Op: "throttle script", Err: fmt.Errorf("reply element %d is %T, want integer", i, e)}
		}
		nums[i] = n
	}
	switch nums[0] {
	case statusAllowed, statusLimited:
		if len(nums) != 4 {
			break
		}
		return Decision{
			Allowed:   nums[0] == statusAllowed,
			Wait:      time.Duration(nums[1]) * time.Microsecond,
			Remaining: nums[2],
			Reserved:  nums[3] == 1,
		}, nil
	case statusInvalid:
		return Decision{}, &InvalidError{Code: Code(nums[1]), Index: int(nums[2])}
	case statusDuplicate:
		return Decision{Duplicate: true, Owner: nums[1]}, nil
	}
	return Decision{}, &RedisError{Op: "throttle script", Err: fmt.Errorf("unexpected reply %v", arr)}
}

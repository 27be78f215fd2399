package throttle

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/throttler/throttler/lua"
)

// maxJobsPerCall caps the jobs one function call decides: the function's
// own bound.
const maxJobsPerCall = lua.MaxJobs

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

// decideBatch decides n jobs prepared by prep, as DecideBatch.
func (l *Limiter) decideBatch(ctx context.Context, n int, prep func(i int) (prepared, error)) []Result {
	return l.decideBatchWith(ctx, n, prep, nil)
}

// decideBatchWith is decideBatch sending the calls extra in the same
// pipeline, after the decisions; their replies are left in their cmd.
func (l *Limiter) decideBatchWith(ctx context.Context, n int, prep func(i int) (prepared, error), extra []fcall) []Result {
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
		key := groupKey{now: p.now, owner: p.ownerKey != "", job: p.resvKey != "", windows: p.windows}
		if !l.crossTenant {
			key.tag = p.tag
		}
		g, ok := open[key]
		prev, seen := last[p.tag]
		if ok && len(calls[g].parts) < maxJobsPerCall && calls[g].charges+len(p.limitKeys) <= lua.MaxCharges && (!seen || prev <= g) {
			calls[g].parts = append(calls[g].parts, p)
			calls[g].reqs = append(calls[g].reqs, i)
			calls[g].charges += len(p.limitKeys)
			last[p.tag] = g
			continue
		}
		open[key] = len(calls)
		last[p.tag] = len(calls)
		calls = append(calls, call{parts: []prepared{p}, reqs: []int{i}, charges: len(p.limitKeys)})
	}
	if len(calls) == 0 && len(extra) == 0 {
		return results
	}
	fcalls := make([]fcall, len(calls), len(calls)+len(extra))
	for k := range calls {
		l.build(&calls[k])
		fcalls[k] = calls[k].fcall
	}
	fcalls = append(fcalls, extra...)
	l.lib.run(ctx, fcalls)
	for k := range calls {
		calls[k].fcall = fcalls[k]
		calls[k].results(results)
	}
	copy(extra, fcalls[len(calls):])
	return results
}

// groupKey is what the jobs of one function call share: the clock, whether
// they have job keys and owner keys, whether they have sliding windows (a
// call with one takes the function's general path: the jobs of buckets
// alone keep to its fast paths), and on a cluster the tenant.
type groupKey struct {
	tag                 string
	now                 string
	owner, job, windows bool
}

// prepared is one validated request, in the pieces a function call is
// built of.
type prepared struct {
	tag         string // the tenant's hash tag
	limitKeys   []string
	limitArgs   []any // rate, period, burst of each limit; with one limit, the Limiter's own (read only)
	now, cost   string
	resvKey     string // reservation key, or ""
	ownerKey    string // owner key, or "" (a Decider's only)
	shiftKey    string // the tenant's shift key, with ownerKey (SHIFT, lua/head.lua)
	incarnation string // with ownerKey
	fresh       bool
	shadow      bool // decided against the tenant's shadow buckets, always admitted
	windows     bool // some of its limits are sliding windows
	limits      Limits
	cap         *capCall // the running cap it is admitted under, or nil
}

// limit is the job's limit at position i counting from 1, as the
// function names the one that set a wait; the zero Limit for 0 (none).
func (p prepared) limit(i int64) Limit {
	if i < 1 || i > int64(len(p.limits)) {
		return Limit{}
	}
	return p.limits[i-1]
}

// call is one function call deciding one or more requests.
type call struct {
	parts   []prepared // the requests it decides
	reqs    []int      // their indices in the batch
	charges int        // their limits, all counted (at most lua.MaxCharges)
	fcall
}

// prepare validates req and builds the pieces of its function call.
// Everything the function would refuse is refused here first, without a
// round trip.
func (l *Limiter) prepare(req Request) (prepared, error) {
	tag, err := l.keys.tag(req.Tenant)
	if err != nil {
		return prepared{}, err
	}
	pol := l.policies.Policy(req.Tenant) // valid (Policies)
	limits := pol.Limits
	if len(req.Limits) > 0 {
		if err := req.Limits.Validate(); err != nil {
			return prepared{}, &InvalidError{Code: CodeLimits, Detail: err.Error()}
		}
		limits = req.Limits
	} else if len(limits) == 0 {
		return prepared{}, &InvalidError{Code: CodeLimits, Detail: fmt.Sprintf("no limits for tenant %q", req.Tenant)}
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
		shadow:    pol.Shadow,
		limits:    limits,
		windows:   limits.hasWindow(),
	}
	for _, lim := range limits {
		if lim.Unit != "" {
			// A calendar window's starts depend on now: built per job.
			p.limitKeys = append(p.limitKeys, l.keys.prefix+":"+tag+l.calendarSuffix(lim, pol.Shadow))
			at := req.At
			if at.IsZero() {
				at = time.Now() // Redis TIME decides; the window before now's is passed too
			}
			p.limitArgs = append(p.limitArgs, strconv.FormatInt(lim.Rate, 10),
				strconv.FormatInt(lim.periodMicros(), 10), l.calendarArg(lim, at))
			continue
		}
		r := l.render(lim)
		suffix := r.keySuffix
		if pol.Shadow {
			suffix = r.shadowSuffix
		}
		p.limitKeys = append(p.limitKeys, l.keys.prefix+":"+tag+suffix)
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

// renderedLimit is a limit as its state keys and the function spell it.
type renderedLimit struct {
	keySuffix    string // ":l:PERIOD", after the tenant's tag
	shadowSuffix string // ":s:PERIOD", in shadow mode
	args         [3]any // rate, period µs, burst
}

// render spells lim for keys and the function, once per limit.
func (l *Limiter) render(lim Limit) *renderedLimit {
	if r, ok := l.rendered.Load(lim); ok {
		return r.(*renderedLimit)
	}
	r, _ := l.rendered.LoadOrStore(lim, &renderedLimit{
		keySuffix:    limitKeySuffix(lim, false),
		shadowSuffix: limitKeySuffix(lim, true),
		args: [3]any{
			strconv.FormatInt(lim.Rate, 10),
			strconv.FormatInt(lim.periodMicros(), 10),
			burstArg(lim),
		},
	})
	return r.(*renderedLimit)
}

// burstArg is the burst argument of lim: a sliding window is written as
// a limit of burst "w" (lua/window.lua, WINDOWS).
func burstArg(lim Limit) string {
	if lim.Sliding {
		return "w"
	}
	return strconv.FormatInt(lim.Burst, 10)
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
// lua/decide.lua): the short form for one job under one limit
// without a job id, else the general form, in which a job with the limits of
// the job before sends 0 for them.
func (l *Limiter) build(c *call) {
	c.fn = l.lib.decide
	first := c.parts[0]
	if len(c.parts) == 1 && first.resvKey == "" && len(first.limitKeys) == 1 && !first.shadow {
		c.keys = first.limitKeys
		c.args = append(append(make([]any, 0, 5), arg(first.now), arg(first.cost)), first.limitArgs...)
		return
	}
	perJob := len(first.limitKeys) + 3
	c.keys = make([]string, 0, len(c.parts)*perJob)
	c.args = make([]any, 0, 2+len(c.parts)*4+len(first.limitArgs))
	c.args = append(c.args, arg(first.now), l.horizonArg)
	for k, p := range c.parts {
		c.keys = append(c.keys, p.limitKeys...)
		if p.resvKey != "" {
			c.keys = append(c.keys, p.resvKey)
		}
		if p.ownerKey != "" {
			c.keys = append(c.keys, p.ownerKey, p.shiftKey)
		}
		inc := any("0")
		if p.incarnation != "" {
			inc = arg(p.incarnation)
		}
		c.args = append(c.args, arg(p.cost), inc, jobFlags[flag(p.fresh)+2*flag(p.shadow)])
		if k > 0 && sameLimits(p.limitArgs, c.parts[k-1].limitArgs) {
			c.args = append(c.args, "0")
			continue
		}
		c.args = append(c.args, arg(strconv.Itoa(len(p.limitKeys))))
		c.args = append(c.args, p.limitArgs...)
	}
}

// jobFlags are a job's flags argument (lua/decide.lua): 1 fresh,
// 2 shadow.
var jobFlags = [4]any{"0", "1", "2", "3"}

// flag is 1 for true, else 0.
func flag(b bool) int {
	if b {
		return 1
	}
	return 0
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

// tuple reads the reply tuple of the call's k-th job.
func (c *call) tuple(k int, t []int64) (Decision, error) {
	switch t[0] {
	case statusAdmitted:
		d := Decision{Outcome: Admitted, Remaining: t[2], Shadow: c.parts[k].shadow}
		if t[1] > 0 {
			d.ShadowWait, d.Binding = time.Duration(t[1])*time.Microsecond, c.parts[k].limit(t[3]>>1)
		}
		return d, nil
	case statusLimited:
		d := Decision{Outcome: Limited, Wait: time.Duration(t[1]) * time.Microsecond, Remaining: t[2], Binding: c.parts[k].limit(t[3] >> 1)}
		if t[3]&1 == 1 {
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

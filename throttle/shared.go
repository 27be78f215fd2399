package throttle

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/throttler/throttler/lua"
)

// SharedOptions tune how a shared level (Level) hands out its turns.
type SharedOptions struct {
	// Lookahead is how far ahead of now a level reserves slots for the
	// jobs waiting in its list, each call: the longer, the fewer calls
	// keep the level busy; the shorter, the sooner a quiet tenant's job
	// finds a slot free. Defaults to 100ms.
	Lookahead time.Duration
	// Direct is how far ahead of now a job at the head of the fair order
	// may be granted a slot without waiting in the list: past Lookahead
	// by at least the time between two calls. Defaults to Lookahead plus
	// 150ms.
	Direct time.Duration
	// TTL is how long a level's list, fair places and passes outlive
	// their last write, and a pass its slot: at least the longest a
	// parked job waits before coming back by itself. Defaults to the
	// limiter's horizon plus 10 minutes.
	TTL time.Duration
}

// Shared decides jobs under the limits above their tenants: a group's and
// the global one (Level), each shared by many tenants' jobs in turns. A
// Decider built WithLevels calls it before a job's tenant is decided.
// Safe for concurrent use.
type Shared struct {
	l      *Limiter
	levels LevelPolicies
	o      SharedOptions
	// noCalls: this Shared's decisions call no queued job (WithoutCalls).
	noCalls bool
}

// WithoutCalls returns a Shared like s whose decisions call no waiting
// job: for a caller that cannot wake the jobs called (the fast lane).
// The workers' pokes call them.
func (s *Shared) WithoutCalls() *Shared {
	c := *s
	c.noCalls = true
	return &c
}

// NewShared returns the shared levels of l's jobs, their policies given
// by levels.
func NewShared(l *Limiter, levels LevelPolicies, o SharedOptions) (*Shared, error) {
	if l == nil || levels == nil {
		return nil, errors.New("throttle: shared levels need a limiter and their policies")
	}
	if o.Lookahead == 0 {
		o.Lookahead = 100 * time.Millisecond
	}
	if o.Direct == 0 {
		o.Direct = o.Lookahead + 150*time.Millisecond
	}
	if o.TTL == 0 {
		o.TTL = l.horizon + 10*time.Minute
	}
	if o.Lookahead < 0 || o.Lookahead > time.Minute || o.Direct < o.Lookahead || o.Direct > time.Minute || o.TTL < time.Second {
		return nil, fmt.Errorf("throttle: shared options out of range: lookahead %s, direct %s, TTL %s", o.Lookahead, o.Direct, o.TTL)
	}
	return &Shared{l: l, levels: levels, o: o}, nil
}

// Policy returns the level's policy now.
func (s *Shared) Policy(lv Level) Policy {
	if lv.Group == "" {
		return s.levels.Global()
	}
	return s.levels.Group(lv.Group)
}

// LevelJob is one job decided at a level.
type LevelJob struct {
	Tenant, JobID string
	// Flow is whose turn the job takes: its tenant, or at the global
	// level its group when it has one.
	Flow string
	// Cost is the job's cost (at least 1); Weight its flow's weight (1 to
	// MaxWeight).
	Cost, Weight int64
	// Keep keeps the job's pass past its first use: a later level may
	// make it wait, and back it must pass this one again uncharged.
	Keep bool
}

// validate checks what names j in a level's keys: its tenant and flow
// as plain names (a worker's tenants and groups are), its job id.
func (j LevelJob) validate() error {
	if j.Tenant == "" || !plainTenant(j.Tenant) || j.Flow == "" || !plainTenant(j.Flow) {
		return &InvalidError{Code: CodeTenant, Detail: fmt.Sprintf("tenant %q or flow %q not a plain name at a shared level", j.Tenant, j.Flow)}
	}
	if j.JobID == "" {
		return &InvalidError{Code: CodeJobID, Detail: "empty job id"}
	}
	if j.Cost < 0 || j.Cost > MaxBurst || j.Weight < 0 || j.Weight > MaxWeight {
		return &InvalidError{Code: CodeCost, Detail: fmt.Sprintf("cost %d or weight %d out of range", j.Cost, j.Weight)}
	}
	return validJobID(j.JobID)
}

// member names j in a level's list and pass set.
func (j LevelJob) member() string {
	return strconv.FormatInt(max(j.Cost, 1), 10) + "/" + j.Tenant + "/" + j.JobID
}

// LevelDecision is what a level decided for one job.
type LevelDecision struct {
	// Passed: the job may go on to the next level after Wait (0: now).
	// Else it waits in the level's list, Ahead jobs before it, for a
	// call that names it (Waiter) to wake it.
	Passed bool
	Wait   time.Duration
	Ahead  int64
	// ShadowWait, for a level in shadow mode, is the wait enforcing it
	// would have imposed.
	ShadowWait time.Duration
}

// levelCall builds the keys and the terms' arguments of a call at lv
// under pol at now.
func (s *Shared) levelCall(lv Level, pol Policy, now time.Time) (keys []string, terms []any) {
	lk := s.l.keys.levels().of(lv)
	keys = []string{lk.list, lk.fair, lk.passes, lk.scratch}
	terms = []any{strconv.Itoa(len(pol.Limits))}
	for _, lim := range pol.Limits {
		keys = append(keys, s.l.termKey(lk.tag, lim, pol.Shadow))
		if lim.Unit != "" {
			terms = append(terms, strconv.FormatInt(lim.Rate, 10), strconv.FormatInt(lim.periodMicros(), 10), s.l.calendarArg(lim, now))
			continue
		}
		r := s.l.render(lim)
		terms = append(terms, r.args[:]...)
	}
	return keys, terms
}

// usText writes d in µs.
func usText(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }

// shareCall is one call of share at a level, prepared.
type shareCall struct {
	lv   Level
	jobs []int // indices into the batch
	fcall
}

// buildShare prepares the share calls deciding jobs at lv under pol (idx
// their indices in js), at most lua.MaxJobs each; no jobs is a poke.
func (s *Shared) buildShare(lv Level, pol Policy, js []LevelJob, idx []int) []shareCall {
	keys, terms := s.levelCall(lv, pol, time.Now())
	keys = append(keys, s.l.keys.levels().of(lv).groups)
	ahead := usText(s.o.Lookahead)
	if s.noCalls && len(js) > 0 {
		ahead = "n"
	}
	head := append([]any{"0", ahead, usText(s.o.Direct), strconv.FormatInt(s.o.TTL.Milliseconds(), 10)}, terms...)
	var out []shareCall
	for len(idx) > 0 || len(out) == 0 {
		n := min(len(idx), lua.MaxJobs)
		c := shareCall{lv: lv, jobs: idx[:n], fcall: fcall{fn: s.l.lib.share, keys: keys}}
		c.args = append(c.args, head...)
		for _, i := range idx[:n] {
			j := js[i]
			mode := "0"
			switch {
			case pol.Shadow:
				mode = "2"
			case j.Keep:
				mode = "1"
			}
			c.args = append(c.args, j.member(), j.Flow, strconv.FormatInt(max(j.Cost, 1), 10), strconv.FormatInt(max(j.Weight, 1), 10), mode)
		}
		out = append(out, c)
		idx = idx[n:]
	}
	return out
}

// readShare reads a share call's reply into out (by the batch's
// indices) and returns the jobs it called.
func readShare(c shareCall, out []LevelDecision, errs []error) []Waiter {
	v, err := c.cmd.Slice()
	if err == nil && len(v) == 4 && len(c.jobs) > 1 {
		// The level's stored state refused the whole call before its
		// first write: every job of it is refused alike.
		if t, _ := v[0].(int64); t == statusInvalid || t == statusWrongType {
			err := refusal(c.fcall, v)
			for _, i := range c.jobs {
				errs[i] = err
			}
			return nil
		}
	}
	if err == nil && len(v) < 4*len(c.jobs) {
		err = fmt.Errorf("reply %v for %d jobs", v, len(c.jobs))
	}
	if err != nil {
		if strings.HasPrefix(err.Error(), "BADCALL") {
			err = &InvalidError{Code: CodeArgCount, Detail: err.Error()}
		} else {
			err = &RedisError{Op: "FCALL " + c.fn, Err: err}
		}
		for _, i := range c.jobs {
			errs[i] = err
		}
		return nil
	}
	for k, i := range c.jobs {
		t := make([]int64, 4)
		for e := range t {
			t[e], _ = v[4*k+e].(int64)
		}
		switch t[0] {
		case statusAdmitted:
			out[i] = LevelDecision{Passed: true, Wait: time.Duration(t[1]) * time.Microsecond, ShadowWait: time.Duration(t[3]) * time.Microsecond}
		case shareWaiting:
			out[i] = LevelDecision{Ahead: t[1]}
		default:
			errs[i] = replyStatus(c.fn, c.keys[0], t)
		}
	}
	var called []Waiter
	for _, e := range v[4*len(c.jobs):] {
		m, _ := e.(string)
		if w, ok := parseLevelMember(c.lv, m); ok {
			called = append(called, w)
		}
	}
	return called
}

// shareWaiting is share's status of a job that joined the level's list.
const shareWaiting = 6

// parseLevelMember reads a member of lv's list: cost/tenant/job id.
func parseLevelMember(lv Level, m string) (Waiter, bool) {
	c, rest, ok := strings.Cut(m, "/")
	if !ok {
		return Waiter{}, false
	}
	cost, err := strconv.ParseInt(c, 10, 64)
	t, id, ok := strings.Cut(rest, "/")
	return Waiter{Tenant: t, JobID: id, Level: lv.String(), Cost: cost}, ok && err == nil && t != "" && id != ""
}

// Decide decides jobs at the levels given for each (levels[i] for
// js[i], all its jobs at one level), one pipelined round trip, and
// returns what each level decided, the errors by job, and the waiting
// jobs the calls called, for the caller to wake.
func (s *Shared) Decide(ctx context.Context, levels []Level, js []LevelJob) ([]LevelDecision, []error, []Waiter) {
	out := make([]LevelDecision, len(js))
	errs := make([]error, len(js))
	byLevel := map[Level][]int{}
	var order []Level
	for i := range js {
		if errs[i] = js[i].validate(); errs[i] != nil {
			continue
		}
		lv := levels[i]
		if _, ok := byLevel[lv]; !ok {
			order = append(order, lv)
		}
		byLevel[lv] = append(byLevel[lv], i)
	}
	var calls []shareCall
	for _, lv := range order {
		calls = append(calls, s.buildShare(lv, s.Policy(lv), js, byLevel[lv])...)
	}
	return out, errs, s.runShare(ctx, calls, out, errs)
}

// runShare sends calls in one pipeline and reads them.
func (s *Shared) runShare(ctx context.Context, calls []shareCall, out []LevelDecision, errs []error) []Waiter {
	fc := make([]fcall, len(calls))
	for k := range calls {
		fc[k] = calls[k].fcall
	}
	s.l.lib.run(ctx, fc)
	var called []Waiter
	for k := range calls {
		calls[k].fcall = fc[k]
		called = append(called, readShare(calls[k], out, errs)...)
	}
	return called
}

// Poke hands each level's room that time made to the jobs waiting in its
// list, in one round trip, and returns the jobs called, for the caller to
// wake. A level without limits now, or in shadow mode, hands back every
// job still queued there (at most lua.MaxCalls a call): it holds none
// back any more.
func (s *Shared) Poke(ctx context.Context, levels []Level) ([]Waiter, error) {
	var calls []shareCall
	for _, lv := range levels {
		pol := s.Policy(lv)
		if len(pol.Limits) == 0 || pol.Shadow {
			pol = Policy{}
		}
		calls = append(calls, s.buildShare(lv, pol, nil, nil)...)
	}
	called := s.runShare(ctx, calls, nil, nil)
	var errs []error
	for _, c := range calls {
		if err := c.cmd.Err(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return called, &RedisError{Op: "poking shared levels", Err: errors.Join(errs...)}
	}
	return called, nil
}

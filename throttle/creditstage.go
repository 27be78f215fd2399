package throttle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// paidMargin is added to a paid marker's TTL beyond the horizon and the
// tenant's longest fill time: a job reserved at the horizon that comes back
// late (a slow redelivery, a worker restart) still finds itself paid.
const paidMargin = 5 * time.Minute

// creditJob is one job of the credits stage (lua/credits.lua, credits),
// validated.
type creditJob struct {
	tag     string
	key     string // the paid marker, or "" (no job id)
	now     string // µs, "0" for Redis TIME
	ttl     string // the marker's TTL, ms
	cost    int64
	args    [4]any // cost, order, incarnation, flags
	mode    CreditsMode
	shadow  bool
	inc     int64
	charged bool // the stage charged it: refunded when it does not run
}

// Flags of a job of the credits function (lua/credits.lua).
const (
	creditReleased = 1
	creditShadow   = 2
	creditMarker   = 4
	creditDLQ      = 8
)

// creditJobOf validates one job of a tenant whose policy pol draws on
// credits.
func (l *Limiter) creditJobOf(req Request, pol Policy, order, inc int64, released bool) (creditJob, error) {
	tag, err := l.keys.tag(req.Tenant)
	if err != nil {
		return creditJob{}, err
	}
	cost := max(req.Cost, 1)
	if req.Cost < 0 || cost > MaxBurst {
		return creditJob{}, &InvalidError{Code: CodeCost, Detail: fmt.Sprintf("cost %d out of range [1, %d]", req.Cost, MaxBurst)}
	}
	if order < 0 || order >= maxExact {
		return creditJob{}, &InvalidError{Code: CodeOrder, Detail: fmt.Sprintf("order %d outside [0, 2^53)", order)}
	}
	if err := validIncarnation(inc); err != nil {
		return creditJob{}, err
	}
	j := creditJob{tag: tag, now: "0", cost: cost, mode: pol.Credits, shadow: pol.Shadow, inc: inc}
	if !req.At.IsZero() {
		now := req.At.UnixMicro()
		if now < 1 || now >= maxExact {
			return creditJob{}, &InvalidError{Code: CodeNow, Detail: fmt.Sprintf("time %s out of range", req.At)}
		}
		j.now = strconv.FormatInt(now, 10)
	}
	flags := 0
	if req.JobID != "" {
		if err := validJobID(req.JobID); err != nil {
			return creditJob{}, err
		}
		j.key, flags = l.keys.paid(tag, req.JobID), creditMarker
	}
	if released {
		flags |= creditReleased
	}
	if pol.Shadow {
		flags |= creditShadow
	}
	if pol.Credits == CreditsDeadLetter {
		flags |= creditDLQ
	}
	limits := pol.Limits
	if len(req.Limits) > 0 {
		limits = req.Limits
	}
	ttl := l.horizon + limits.longestFill() + paidMargin
	j.ttl = strconv.FormatInt(ttl.Milliseconds(), 10)
	j.args = [4]any{strconv.FormatInt(cost, 10), strconv.FormatInt(order, 10), strconv.FormatInt(inc, 10), strconv.Itoa(flags)}
	return j, nil
}

// creditCall is one credits call: jobs of one tenant and one clock.
type creditCall struct {
	jobs []int // indices of the jobs it charges
	fcall
}

// withCredits decides n jobs of which some draw on credits: job gives
// each one's credits job (ok false: its tenant has none; an error: it is
// invalid). The credits stage charges those that do, in one pipelined
// round trip; decide then decides the jobs the stage let through (their
// indices), whose results it returns in that order; and the jobs charged
// now that did not run (Limited, Capped, or an invalid input that wrote
// nothing) get their credits back, in one more round trip when there
// are any. A Redis error after the charge leaves the charge: the job's
// paid marker keeps it paid for when it comes back.
func (l *Limiter) withCredits(ctx context.Context, n int, job func(i int) (creditJob, bool, error), decide func(pass []int) []Result) []Result {
	results := make([]Result, n)
	jobs := make([]creditJob, n)
	has := make([]bool, n)
	var calls []creditCall
	open := map[[2]string]int{}
	last := map[string]int{}
	pass := make([]int, 0, n)
	for i := range n {
		j, ok, err := job(i)
		switch {
		case err != nil:
			results[i].Err = err
			continue
		case !ok:
			pass = append(pass, i)
			continue
		}
		jobs[i], has[i] = j, true
		// A job joins an open call of its tenant and clock only if none of
		// its tenant's jobs went to a later call, so each sees the ones
		// before it.
		key := [2]string{j.tag, j.now}
		g, ok := open[key]
		if ok && len(calls[g].jobs) < maxJobsPerCall && last[j.tag] <= g {
			calls[g].jobs = append(calls[g].jobs, i)
			continue
		}
		open[key], last[j.tag] = len(calls), len(calls)
		calls = append(calls, creditCall{jobs: []int{i}})
	}
	l.chargeCredits(ctx, calls, jobs, results)
	for i := range n {
		if has[i] && results[i].Err == nil && results[i].Outcome != Unfunded {
			pass = append(pass, i)
		}
	}
	if len(pass) == 0 {
		return results
	}
	slices.Sort(pass)
	for k, r := range decide(pass) {
		i := pass[k]
		shadowUnfunded := results[i].ShadowUnfunded
		results[i] = r
		results[i].ShadowUnfunded = shadowUnfunded
	}
	l.refundCredits(ctx, jobs, results)
	return results
}

// chargeCredits sends calls in one pipeline and reads each job's outcome
// into results: an Unfunded decision, ShadowUnfunded, an error, or
// nothing (the job goes on to be decided; jobs[i].charged says whether it
// was charged now).
func (l *Limiter) chargeCredits(ctx context.Context, calls []creditCall, jobs []creditJob, results []Result) {
	if len(calls) == 0 {
		return
	}
	fcalls := make([]fcall, len(calls))
	for k, c := range calls {
		first := jobs[c.jobs[0]]
		f := fcall{fn: l.lib.credits, keys: []string{l.keys.credits(first.tag)}, args: []any{first.now, first.ttl}}
		for _, i := range c.jobs {
			if jobs[i].key != "" {
				f.keys = append(f.keys, jobs[i].key)
			}
			f.args = append(f.args, jobs[i].args[:]...)
		}
		fcalls[k] = f
	}
	l.lib.run(ctx, fcalls)
	for k, c := range calls {
		v, err := replyInts(fcalls[k].cmd, fcalls[k].fn, 4*len(c.jobs))
		for x, i := range c.jobs {
			if err != nil {
				results[i].Err = err
				continue
			}
			t := v[4*x : 4*x+4]
			switch t[0] {
			case statusAdmitted:
				jobs[i].charged = t[1] == 1
				results[i].ShadowUnfunded = t[3]&1 == 1
			case statusUnfunded:
				results[i].Decision = Decision{Outcome: Unfunded, Wait: min(time.Duration(t[1])*time.Microsecond, CreditsGateRetry), Balance: t[2],
					Untrusted: t[3]&1 == 1, CreditsDeadLetter: jobs[i].mode == CreditsDeadLetter}
			case statusInvalid:
				results[i].Err = &InvalidError{Code: Code(t[1]), Index: int(t[2])}
			case statusWrongType:
				results[i].Err = wrongType(fcalls[k], t[1])
			default:
				results[i].Err = &RedisError{Op: "FCALL " + fcalls[k].fn, Err: fmt.Errorf("unexpected reply %v for job %d", t, x)}
			}
		}
	}
}

// statusUnfunded is the credits function's reply status of a job the
// balance does not cover (lua/credits.lua).
const statusUnfunded = 7

// refunded reports whether a job charged credits now must get them back:
// it did not run, and what stopped it wrote nothing or held it back
// without a slot. Admitted and Reserved jobs keep their charge, and so does
// a Duplicate (the incarnation that ran may be passing on the charge), and
// a job whose decision failed in Redis (nothing is known of it).
func refunded(r Result) bool {
	if r.Err != nil {
		return errors.Is(r.Err, ErrInvalid)
	}
	return r.Outcome == Limited || r.Outcome == Capped
}

// refundCredits gives back, in one round trip, the credits of the jobs
// charged now that did not run (refunded), one call per tenant. A refund
// that fails is left: the job's marker keeps it paid (a job without an id
// loses its charge).
func (l *Limiter) refundCredits(ctx context.Context, jobs []creditJob, results []Result) {
	var calls []fcall
	at := map[string]int{}
	for i, j := range jobs {
		if !j.charged || !refunded(results[i]) {
			continue
		}
		k, ok := at[j.tag]
		if !ok || len(calls[k].keys) > maxJobsPerCall {
			k = len(calls)
			at[j.tag] = k
			calls = append(calls, fcall{fn: l.lib.refund, keys: []string{l.keys.credits(j.tag)}, args: []any{int64(0)}})
		}
		if j.key == "" {
			calls[k].args[0] = calls[k].args[0].(int64) + j.cost
			continue
		}
		calls[k].keys = append(calls[k].keys, j.key)
		calls[k].args = append(calls[k].args, strconv.FormatInt(j.inc, 10))
	}
	l.lib.run(ctx, calls)
}

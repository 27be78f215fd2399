package throttle

import (
	"context"
	"strconv"
)

// decideWithCredits is Limiter.DecideBatch when some request's tenant
// draws on credits: the credits stage first (withCredits), then the
// requests it let through. A request of a tenant with credits and no
// limits is admitted once its credits are charged.
func (l *Limiter) decideWithCredits(ctx context.Context, reqs []Request) []Result {
	job := func(i int) (creditJob, bool, error) {
		pol := l.policies.Policy(reqs[i].Tenant)
		if pol.Credits == CreditsOff {
			return creditJob{}, false, nil
		}
		j, err := l.creditJobOf(reqs[i], pol, 0, 0, false)
		return j, true, err
	}
	return l.withCredits(ctx, len(reqs), job, func(pass []int) []Result {
		out := make([]Result, len(pass))
		rated := make([]int, 0, len(pass)) // positions in pass
		for k, i := range pass {
			if pol := l.policies.Policy(reqs[i].Tenant); unlimited(pol, reqs[i]) {
				out[k].Decision = Decision{Outcome: Admitted, Shadow: pol.Shadow}
				continue
			}
			rated = append(rated, k)
		}
		rs := l.decideBatch(ctx, len(rated), func(x int) (prepared, error) { return l.prepare(reqs[pass[rated[x]]]) })
		for x, r := range rs {
			out[rated[x]] = r
		}
		return out
	})
}

// unlimited reports whether req, of a tenant of policy pol, has credits
// and nothing else to be decided by: no limits, no running cap in force.
func unlimited(pol Policy, req Request) bool {
	return pol.Credits != CreditsOff && len(pol.Limits) == 0 && len(req.Limits) == 0 && (pol.Running == 0 || pol.Shadow)
}

// scan reports whether some copy's tenant has a running cap in force, and
// whether some copy's tenant draws on credits: one policy read per copy.
func (d *Decider) scan(copies []Copy) (capped, credits bool) {
	for _, cp := range copies {
		p := d.l.policies.Policy(cp.Tenant)
		capped = capped || (p.Running > 0 && !p.Shadow)
		credits = credits || p.Credits != CreditsOff
	}
	return capped, credits
}

// decideWithCredits is DecideBatch when some copy's tenant draws on
// credits: the credits stage first (Limiter.withCredits), then the copies
// it let through, as DecideBatch decides them.
func (d *Decider) decideWithCredits(ctx context.Context, copies []Copy, capped bool) []Result {
	job := func(i int) (creditJob, bool, error) {
		cp := copies[i]
		pol := d.l.policies.Policy(cp.Tenant)
		if pol.Credits == CreditsOff {
			return creditJob{}, false, nil
		}
		if cp.JobID == "" {
			return creditJob{}, true, &InvalidError{Code: CodeJobID, Detail: "a copy needs a job id"}
		}
		j, err := d.l.creditJobOf(cp.Request, pol, cp.Order, cp.Incarnation, cp.Released)
		return j, true, err
	}
	return d.l.withCredits(ctx, len(copies), job, func(pass []int) []Result {
		sub := make([]Copy, len(pass))
		for k, i := range pass {
			sub[k] = copies[i]
		}
		if anyUnlimited(d.l.policies, sub) {
			// Their owner calls ride with the others (decideCapped).
			return d.decideCapped(ctx, sub)
		}
		return d.decideRates(ctx, sub, capped)
	})
}

// unlimitedCopy reports whether cp's tenant, under pols, has credits and
// nothing else to decide it by (see unlimited).
func unlimitedCopy(pols Policies, cp Copy) bool {
	return unlimited(pols.Policy(cp.Tenant), cp.Request)
}

// anyUnlimited reports whether some copy is unlimited under pols.
func anyUnlimited(pols Policies, copies []Copy) bool {
	for _, cp := range copies {
		if unlimitedCopy(pols, cp) {
			return true
		}
	}
	return false
}

// ownerCall is the claim call (lua/owners.lua) that makes cp, an
// unlimited copy let through by its credits, its job's owner, so that
// no other incarnation of the job runs (Duplicate); the record lives as
// long as a paid marker. A Fresh copy has no copy that could run: it needs
// no call (ok false).
func ownerCall(l *Limiter, cp Copy) (f fcall, ok bool, err error) {
	if cp.Fresh {
		return fcall{}, false, nil
	}
	key, err := ownerKey(l.keys, cp.Tenant, cp.JobID, cp.Incarnation)
	if err != nil {
		return fcall{}, false, err
	}
	ttl := l.horizon + paidMargin
	return fcall{fn: l.lib.claim, keys: []string{key},
		args: []any{strconv.FormatInt(cp.Incarnation, 10), strconv.FormatInt(ttl.Milliseconds(), 10)}}, true, nil
}

// ownerResult reads the reply of cp's ownerCall: Admitted when cp owns
// its job, else Duplicate.
func ownerResult(l *Limiter, f fcall, cp Copy) (Decision, error) {
	v, err := replyInts(f.cmd, f.fn, 4)
	if err != nil {
		return Decision{}, err
	}
	if err := replyStatus(f.fn, f.keys[0], v); err != nil {
		return Decision{}, err
	}
	if v[2] != cp.Incarnation {
		return Decision{Outcome: Duplicate, Owner: v[2]}, nil
	}
	return Decision{Outcome: Admitted, Shadow: l.policies.Policy(cp.Tenant).Shadow}, nil
}

package throttle

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Settlement is a job's cost settled after it ran: it was charged Charged
// when it was admitted, and reports Cost (Limiter.Settle).
type Settlement struct {
	// Tenant is the job's tenant.
	Tenant string
	// JobID names the job: the settle is applied once per job id, however
	// often it is asked for. Required.
	JobID string
	// Charged is the cost the job was charged when admitted
	// (Request.Cost): 0 means 1.
	Charged int64
	// Cost is the cost the job reports, from 0 to MaxBurst.
	Cost int64
	// Slot is when the job was admitted: a calendar window settles the
	// window holding it, a sliding window refunds only while it lies in
	// the span. The zero time means now, the settle's own clock.
	Slot time.Time
	// At, when not zero, is the settle's now instead of Redis TIME
	// (tests).
	At time.Time
	// Limits are the job's own limits when it was decided with some
	// (Request.Limits); nil means its tenant's policy.
	Limits Limits
	// Group is the job's group (Copy.Group), whose level Decider.Settle
	// settles too; "" for none. Limiter.Settle ignores it.
	Group string
}

// Settled says what a settle did.
type Settled struct {
	// Applied is true when the difference was settled by this call; false
	// when the job's cost did not change, when its policy has nothing to
	// settle, or when it was settled before.
	Applied bool
	// Charged is the difference charged as debt (the job cost more);
	// Refunded the difference given back (it cost less). At most one is
	// above 0.
	Charged, Refunded int64
	// Shift is how much later the charge moved every slot the tenant
	// reserved before it (SHIFT, lua/head.lua): the longest time it added
	// to a bucket's wait; 0 for a refund, a shadow policy, or a charge
	// the buckets' tokens covered.
	Shift time.Duration
}

// Settle settles the difference between what a job was charged when it
// was admitted and the cost it reports after it ran, on every term of its
// tenant's policy, in one function call (lua/settle.lua): token buckets,
// sliding windows, calendar windows and credits. A job that cost more is
// charged the difference as debt (a bucket may go below empty: the next
// jobs wait until it is paid, and the slots the tenant reserved before
// move later by the time it takes to pay, each keeping its charge; a
// balance of credits below 0); one that
// cost less gets the difference back, never above a bucket's burst or a
// window's N. A shadow policy settles its shadow buckets and windows, not
// the credits. The settle is applied once per job id: a second Settle of
// the same job does nothing (Applied false), until the marker expires,
// as long as a paid marker of credits lives. A job whose cost did not
// change makes no call.
func (l *Limiter) Settle(ctx context.Context, s Settlement) (Settled, error) {
	f, out, err := l.settleCall(s)
	if err != nil || f.fn == "" {
		return Settled{}, err
	}
	calls := []fcall{f}
	l.lib.run(ctx, calls)
	v, err := replyInts(calls[0].cmd, f.fn, 4)
	if err != nil {
		return Settled{}, err
	}
	switch v[0] {
	case statusAdmitted:
		if v[1] == 0 {
			return Settled{}, nil
		}
		out.Applied = true
		out.Shift = time.Duration(v[2]) * time.Microsecond
		return out, nil
	case statusInvalid:
		return Settled{}, &InvalidError{Code: Code(v[1]), Index: int(v[2])}
	case statusWrongType:
		return Settled{}, wrongType(calls[0], v[1])
	}
	return Settled{}, &RedisError{Op: "FCALL " + f.fn, Err: fmt.Errorf("unexpected reply %v", v)}
}

// settleCall validates s and builds its function call: none (fn "") when
// there is nothing to settle. out is what the call does if it applies. A
// shadow policy's settle moves no slot: its jobs hold none.
func (l *Limiter) settleCall(s Settlement) (f fcall, out Settled, err error) {
	tag, err := l.keys.tag(s.Tenant)
	if err != nil {
		return fcall{}, Settled{}, err
	}
	if err := s.validate(); err != nil {
		return fcall{}, Settled{}, err
	}
	charged := max(s.Charged, 1)
	now, err := micros(s.At)
	if err != nil {
		return fcall{}, Settled{}, err
	}
	slot, err := micros(s.Slot)
	if err != nil {
		return fcall{}, Settled{}, err
	}
	if s.Cost == charged {
		return fcall{}, Settled{}, nil
	}
	pol := l.policies.Policy(s.Tenant)
	limits := pol.Limits
	if len(s.Limits) > 0 {
		if err := s.Limits.Validate(); err != nil {
			return fcall{}, Settled{}, &InvalidError{Code: CodeLimits, Detail: err.Error()}
		}
		limits = s.Limits
	}
	credits := pol.Credits != CreditsOff && !pol.Shadow
	if len(limits) == 0 && !credits {
		return fcall{}, Settled{}, nil
	}
	dir, diff := "1", s.Cost-charged
	out.Charged = diff
	if diff < 0 {
		dir, diff = "2", -diff
		out = Settled{Refunded: diff}
	}
	ttl := l.horizon + limits.longestFill() + paidMargin
	f = fcall{fn: l.lib.settle, keys: make([]string, 1, 3+len(limits)), args: make([]any, 7, 7+3*len(limits))}
	f.keys[0] = l.keys.settled(tag, s.JobID)
	f.args[0], f.args[1], f.args[2] = strconv.FormatInt(now, 10), strconv.FormatInt(ttl.Milliseconds(), 10), dir
	f.args[3], f.args[4], f.args[5], f.args[6] = strconv.FormatInt(diff, 10), strconv.FormatInt(slot, 10), "0", l.horizonArg
	at := s.Slot
	if at.IsZero() {
		at = cmpTime(s.At, time.Now())
	}
	for _, lim := range limits {
		if lim.Unit != "" {
			f.keys = append(f.keys, l.keys.prefix+":"+tag+l.calendarSuffix(lim, pol.Shadow))
			f.args = append(f.args, strconv.FormatInt(lim.Rate, 10), strconv.FormatInt(lim.periodMicros(), 10), l.calendarArg(lim, at))
			continue
		}
		r := l.render(lim)
		suffix := r.keySuffix
		if pol.Shadow {
			suffix = r.shadowSuffix
		}
		f.keys = append(f.keys, l.keys.prefix+":"+tag+suffix)
		f.args = append(f.args, r.args[:]...)
	}
	// The keys flag: bit 0 the balance, bit 1 the shift key (settle.lua).
	flags := 0
	if credits {
		f.keys = append(f.keys, l.keys.credits(tag))
		flags |= 1
	}
	if !pol.Shadow && len(limits) > 0 {
		f.keys = append(f.keys, l.keys.shift(tag))
		flags |= 2
	}
	f.args[5] = strconv.Itoa(flags)
	return f, out, nil
}

// validate checks s's job id and costs, as every settle of it needs them.
func (s Settlement) validate() error {
	if s.JobID == "" {
		return &InvalidError{Code: CodeJobID, Detail: "a settle needs a job id"}
	}
	if err := validJobID(s.JobID); err != nil {
		return err
	}
	if s.Charged < 0 || max(s.Charged, 1) > MaxBurst {
		return &InvalidError{Code: CodeCost, Detail: fmt.Sprintf("charged cost %d out of range [1, %d]", s.Charged, MaxBurst)}
	}
	if s.Cost < 0 || s.Cost > MaxBurst {
		return &InvalidError{Code: CodeCost, Detail: fmt.Sprintf("reported cost %d out of range [0, %d]", s.Cost, MaxBurst)}
	}
	return nil
}

// micros is t in µs since the Unix epoch, 0 for the zero time, or an
// InvalidError when out of range.
func micros(t time.Time) (int64, error) {
	if t.IsZero() {
		return 0, nil
	}
	us := t.UnixMicro()
	if us < 1 || us >= maxExact {
		return 0, &InvalidError{Code: CodeNow, Detail: fmt.Sprintf("time %s out of range", t)}
	}
	return us, nil
}

// cmpTime is t, or else when t is the zero time.
func cmpTime(t, orElse time.Time) time.Time {
	if t.IsZero() {
		return orElse
	}
	return t
}

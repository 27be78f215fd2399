package throttle

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Bucket is one of a tenant's buckets as a decision now would find it.
type Bucket struct {
	// Limit is the limit the bucket enforces now.
	Limit Limit `json:"limit"`
	// Key is its Redis key.
	Key string `json:"key"`
	// Stored is whether Redis holds a state for it; a bucket without one
	// is full.
	Stored bool `json:"stored"`
	// StoredRate is the rate its state was stored for, when that is not
	// Limit's: the limit changed, and the next decision carries the state
	// over to the new rate (as Tokens and FullAt already show).
	StoredRate int64 `json:"stored_rate,omitempty"`
	// Tokens is what the bucket holds now, at most the burst; below 0 it
	// is in debt: slots are reserved ahead until ReservedUntil.
	Tokens float64 `json:"tokens"`
	// FullAt is when the bucket is full again, left alone.
	FullAt time.Time `json:"full_at"`
	// ReservedUntil is the last slot reserved, when the bucket is in debt.
	ReservedUntil time.Time `json:"reserved_until,omitzero"`
	// Wait is how long a new job of cost 1 would wait for this bucket.
	Wait time.Duration `json:"wait"`
	// InSpan is, for a sliding window, the cost units that count now:
	// those admitted in the last span and those reserved ahead (Tokens is
	// N less them; below 0 after N was lowered).
	InSpan int64 `json:"in_span,omitempty"`
	// Ahead is, for a sliding window, the part of InSpan reserved ahead:
	// units of jobs given a slot after the moment, not yet run.
	Ahead int64 `json:"reserved_ahead,omitempty"`
	// NextLeaves is, for a sliding window, when the earliest admission
	// that counts leaves the span.
	NextLeaves time.Time `json:"next_leaves,omitzero"`
	// InWindow is, for a calendar window, the cost units counted in the
	// window holding now (Tokens is N less them; below 0 after N was
	// lowered); WindowStart is when that window started, ResetsAt when
	// it ends and the next starts with a count of its own.
	InWindow    int64     `json:"in_window,omitempty"`
	WindowStart time.Time `json:"window_start,omitzero"`
	ResetsAt    time.Time `json:"resets_at,omitzero"`
}

// Snapshot is what the limiter holds for one tenant at one moment, read
// without changing anything (Peek).
type Snapshot struct {
	// At is the moment: Redis TIME, unless Peek was given one.
	At time.Time `json:"at"`
	// Policy is the tenant's policy now.
	Policy Policy `json:"-"`
	// Buckets are its buckets, in the order of Policy.Limits.
	Buckets []Bucket `json:"buckets"`
	// Wait is how long a new job of cost 1 would wait now: the longest
	// wait of the buckets; Binding is the limit that sets it.
	Wait    time.Duration `json:"wait"`
	Binding Limit         `json:"held_by,omitzero"`
	// Reserved counts the tenant's jobs holding a reserved slot: jobs
	// deferred, moved or NAK'd, waiting for their slot or just back.
	Reserved int `json:"reserved"`
	// Failures maps the id of each of the tenant's jobs whose handler
	// failed, and that has not run since, to its failures counted.
	Failures map[string]int64 `json:"failures,omitempty"`
	// Cap is the tenant's running cap, when its policy has one.
	Cap *CapSnapshot `json:"cap,omitempty"`
	// Credits is the tenant's balance of credits, when its policy draws
	// on one (read as Limiter.Credits does, at Redis' moment).
	Credits *CreditBalance `json:"credits,omitempty"`
	// Debt is how much later settled debts make its reserved jobs run, nil without a shift.
	Debt *SettleDebt `json:"settle_debt,omitempty"`
}

// Peek reads what the limiter holds for tenant: its buckets, as the next
// decision would find them, the wait a new job would get, the slots its
// jobs hold (and settled debts' shift), failures, running cap and credits.
// It only reads: nothing is charged or written. at sets the moment; the
// zero time reads Redis TIME (the credits' gate is read at Redis TIME). Its scans read the whole keyspace of the tenant's node:
// an operator's tool, not for every job.
func (l *Limiter) Peek(ctx context.Context, tenant string, at time.Time) (Snapshot, error) {
	node, err := l.nodeOf(ctx, tenant)
	if err != nil {
		return Snapshot{}, err
	}
	tag, err := l.keys.tag(tenant)
	if err != nil {
		return Snapshot{}, err
	}
	s := Snapshot{Policy: l.policies.Policy(tenant), At: at}
	if s.At.IsZero() {
		if s.At, err = node.Time(ctx).Result(); err != nil {
			return Snapshot{}, &RedisError{Op: "TIME", Err: err}
		}
	}
	now := s.At.UnixMicro()
	if s.Buckets, s.Wait, s.Binding, err = l.peekTerms(ctx, node, tag, s.Policy, s.At); err != nil {
		return Snapshot{}, err
	}
	if s.Reserved, err = countKeys(ctx, node, l.keys.reservation(tag, "*")); err != nil {
		return Snapshot{}, err
	}
	if s.Failures, err = readFailures(ctx, node, l.keys.failures(tag, "*")); err != nil {
		return Snapshot{}, err
	}
	if s.Debt, err = peekDebt(ctx, node, l.keys, tag); err != nil {
		return Snapshot{}, err
	}
	if s.Policy.Running > 0 {
		if s.Cap, err = peekCap(ctx, node, l.keys, tenant, "", now); err != nil {
			return Snapshot{}, err
		}
	}
	if s.Policy.Credits != CreditsOff {
		c, err := l.Credits(ctx, tenant)
		if err != nil {
			return Snapshot{}, err
		}
		s.Credits = &c
	}
	return s, nil
}

// peekTerms reads the terms of pol under tag (a tenant's or a shared
// level's) at at, as Peek shows them: each one's bucket, and the longest
// wait a job of cost 1 would get, with the term that sets it.
func (l *Limiter) peekTerms(ctx context.Context, node redis.Cmdable, tag string, pol Policy, at time.Time) (bs []Bucket, wait time.Duration, binding Limit, err error) {
	for _, lim := range pol.Limits {
		key := l.termKey(tag, lim, pol.Shadow)
		var b Bucket
		switch {
		case lim.Unit != "":
			b, err = l.peekCalendar(ctx, node, key, lim, at)
		case lim.Sliding:
			b, err = peekWindow(ctx, node, key, lim, at.UnixMicro())
		default:
			b, err = peekBucket(ctx, node, key, lim, at.UnixMicro())
		}
		if err != nil {
			return nil, 0, Limit{}, err
		}
		if b.Wait > wait {
			wait, binding = b.Wait, lim
		}
		bs = append(bs, b)
	}
	return bs, wait, binding, nil
}

// peekBucket reads the bucket of lim at key at now (µs), as the function
// would (lua/rules.lua: state, rebase, tokens, charge, fullIn, where the
// rules are defined; TestPeekAgreesWithTheEngine holds this copy to
// them).
func peekBucket(ctx context.Context, node redis.Cmdable, key string, lim Limit, now int64) (Bucket, error) {
	b := Bucket{Limit: lim, Key: key}
	r, p, burst := lim.Rate, lim.periodMicros(), lim.Burst
	v, err := node.Get(ctx, key).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		return b, &RedisError{Op: "GET " + key, Err: err}
	case len(v) != 16 && len(v) != 20:
		// 20: with the bucket's epoch (lua/rules.lua, EPOCH), which a
		// peek does not need.
		return b, &InvalidError{Code: CodeState, Detail: fmt.Sprintf("%s holds %d bytes, not a state of 16 or 20", key, len(v))}
	default:
		b.Stored = true
	}
	var a, f int64 // the empty time: a + f/r µs
	if b.Stored {
		a = int64(binary.LittleEndian.Uint64(v))
		f = int64(int32(binary.LittleEndian.Uint32(v[8:])))
		r0 := int64(int32(binary.LittleEndian.Uint32(v[12:])))
		if a < 0 || r0 < 1 || r0 > MaxRate || f < 0 || f >= r0 {
			return b, &InvalidError{Code: CodeState, Detail: fmt.Sprintf("%s holds a malformed state", key)}
		}
		if r0 != r {
			b.StoredRate = r0
			var full bool
			if a, f, full = rebase(a, f, r0, r, p, burst, now); full {
				a, f = 0, 0
			}
		}
	}
	// A full bucket's empty time is burst*period/rate before now.
	q, m := burst*p/r, burst*p%r
	la, lf := now-q, int64(0)
	if m > 0 {
		la, lf = la-1, r-m
	}
	if a < la || (a == la && f < lf) {
		a, f = la, lf
	}
	b.Tokens = (float64(now-a)*float64(r) - float64(f)) / float64(p)
	full, frac := a+q, f+m // full again at the empty time plus the fill time
	if frac >= r {
		full, frac = full+1, frac-r
	}
	if frac > 0 {
		full++ // rounded up, as the state's TTL
	}
	b.FullAt = time.UnixMicro(full)
	if a > now || (a == now && f > 0) {
		slot := a
		if f > 0 {
			slot++
		}
		b.ReservedUntil = time.UnixMicro(slot)
	}
	// A job of cost 1 moves the empty time on by period/rate.
	na, nf := a+p/r, f+p%r
	if nf >= r {
		na, nf = na+1, nf-r
	}
	if wait := na - now; wait > 0 || (wait == 0 && nf > 0) {
		if nf > 0 {
			wait++
		}
		b.Wait = time.Duration(wait) * time.Microsecond
	}
	return b, nil
}

// peekWindow reads the sliding window of lim at key at now (µs), as the
// function would (lua/window.lua: WINDOWS, windowRead, windowWait): the
// units admitted that count (in the last span, or reserved ahead), when
// the first of them leaves the span, the last slot reserved, and the wait
// of a job of cost 1: until the last admission, and until unit N from
// the last leaves the span. Each member is '<slot µs>:<first unit>',
// scored by its last unit.
func peekWindow(ctx context.Context, node redis.Cmdable, key string, lim Limit, now int64) (Bucket, error) {
	b := Bucket{Limit: lim, Key: key, Tokens: float64(lim.Rate), FullAt: time.UnixMicro(now)}
	d := lim.periodMicros()
	bad := &InvalidError{Code: CodeState, Detail: key + " holds a malformed sliding window"}
	// admission reads the first member of zs: its slot, first and last unit.
	admission := func(zs []redis.Z, err error) (slot, first, last int64, ok bool, _ error) {
		if err != nil {
			return 0, 0, 0, false, &RedisError{Op: "ZRANGE " + key, Err: err}
		}
		if len(zs) == 0 {
			return 0, 0, 0, false, nil
		}
		m, _ := zs[0].Member.(string)
		st, ft, found := strings.Cut(m, ":")
		slot, err1 := strconv.ParseInt(st, 10, 64)
		first, err2 := strconv.ParseInt(ft, 10, 64)
		if !found || err1 != nil || err2 != nil {
			return 0, 0, 0, false, bad
		}
		return slot, first, int64(zs[0].Score), true, nil
	}
	lastSlot, _, top, ok, err := admission(node.ZRangeWithScores(ctx, key, -1, -1).Result())
	if err != nil || !ok {
		return b, err
	}
	b.Stored = true
	card, err := node.ZCard(ctx, key).Result()
	if err != nil {
		return b, &RedisError{Op: "ZCARD " + key, Err: err}
	}
	// firstAfter finds, by halving (slots rise with the rank), the first
	// admission whose slot is after t: its first unit and slot; top+1 and
	// 0 when there is none.
	firstAfter := func(t int64) (unit, slot int64, err error) {
		unit = top + 1
		for lo, hi := int64(0), card; lo < hi; {
			r := (lo + hi) / 2
			at, u, _, ok, err := admission(node.ZRangeWithScores(ctx, key, r, r).Result())
			if err != nil {
				return 0, 0, err
			}
			if !ok {
				return 0, 0, bad
			}
			if at > t {
				hi, unit, slot = r, u, at
			} else {
				lo = r + 1
			}
		}
		return unit, slot, nil
	}
	live, liveSlot, err := firstAfter(now - d)
	if err != nil {
		return b, err
	}
	b.InSpan = top - live + 1
	ahead, _, err := firstAfter(now)
	if err != nil {
		return b, err
	}
	b.Ahead = top - ahead + 1
	b.Tokens = float64(lim.Rate - b.InSpan)
	var wait int64
	if lastSlot > now {
		b.ReservedUntil, wait = time.UnixMicro(lastSlot), lastSlot-now
	}
	if b.InSpan > 0 {
		b.FullAt = time.UnixMicro(lastSlot + d)
		b.NextLeaves = time.UnixMicro(liveSlot + d)
	}
	if x := top - lim.Rate + 1; x >= live {
		t, _, _, ok, err := admission(node.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
			Key: key, Start: strconv.FormatInt(x, 10), Stop: "+inf", ByScore: true, Count: 1}).Result())
		if err != nil {
			return b, err
		}
		if ok && t+d-now > wait {
			wait = t + d - now
		}
	}
	b.Wait = time.Duration(wait) * time.Microsecond
	return b, nil
}

// rebase is the function's rebase (lua/rules.lua, where the rule is
// defined; TestPeekAgreesWithTheEngine holds this copy to it): it carries
// an empty time (a, f) in units of 1/r0 µs over to the rate r, for period
// p and burst b. A bucket in debt is empty now: its debt was the slots
// reserved under the old limit, whose jobs are decided again when they
// come back. Any other keeps its tokens exactly; full reports a bucket
// full under the new limit.
func rebase(a, f, r0, r, p, b, now int64) (na, nf int64, full bool) {
	if a > now || (a == now && f > 0) {
		return now, 0, false
	}
	d := (now-a)*r0 - f
	if d >= b*p {
		return 0, 0, true
	}
	na, nf = now-d/r, 0
	if m := d % r; m > 0 {
		na, nf = na-1, r-m
	}
	return na, nf, false
}

// countKeys counts the keys matching pattern.
func countKeys(ctx context.Context, node redis.Cmdable, pattern string) (int, error) {
	n := 0
	err := scan(ctx, node, pattern, func(string) error { n++; return nil })
	return n, err
}

// readFailures reads the failure counters matching pattern, by job id.
func readFailures(ctx context.Context, node redis.Cmdable, pattern string) (map[string]int64, error) {
	out := map[string]int64{}
	prefix := strings.TrimSuffix(pattern, "*")
	err := scan(ctx, node, pattern, func(key string) error {
		v, err := node.Get(ctx, key).Result()
		if errors.Is(err, redis.Nil) {
			return nil // expired since the scan
		}
		if err != nil {
			return &RedisError{Op: "GET " + key, Err: err}
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return &InvalidError{Code: CodeFailures, Detail: fmt.Sprintf("%s holds %q", key, v)}
		}
		out[strings.TrimPrefix(key, prefix)] = n
		return nil
	})
	if len(out) == 0 {
		out = nil
	}
	return out, err
}

// scan calls fn with each key matching pattern.
func scan(ctx context.Context, node redis.Cmdable, pattern string, fn func(key string) error) error {
	it := node.Scan(ctx, 0, pattern, 1000).Iterator()
	for it.Next(ctx) {
		if err := fn(it.Val()); err != nil {
			return err
		}
	}
	if err := it.Err(); err != nil {
		return &RedisError{Op: "SCAN " + pattern, Err: err}
	}
	return nil
}

package throttle

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"time"
)

// Carry carries a tenant's buckets over from policy from to policy to when
// a limit's period changes. A bucket is named by its limit's period, so a
// limit whose rate or burst changes keeps its bucket (the function rebases
// it at the next decision), but one whose period changes would start a new
// bucket, full: a fresh burst. Call Carry before deciding anything under
// to, and the new bucket starts with the whole tokens the old one holds,
// at most the new burst (none when it was in debt: the jobs holding its
// slots are decided again when they come back).
//
// A sliding window whose span changes keeps its admissions, to count for
// the new span. The limits of each policy are paired in order of their
// periods, buckets with buckets and windows with windows, and a
// pair of equal periods needs nothing. A new bucket that already exists
// (another worker carried it, or a decision under to made it) is left as
// it is, so every worker may call Carry for the same change. Enforced and
// shadow buckets are never carried into each other. at is the time of the
// change; zero means Redis TIME, as for a Request.
//
// A bucket of from that no limit of to names (its period is gone: a rate
// replaced by a sliding window, a term removed) is then forgiven its debt
// and its epoch advanced (carry's dropped form), so that its reserved
// slots are void: their jobs are decided again under to, and should the
// limit come back, its bucket does not charge them a second time.
func (l *Limiter) Carry(ctx context.Context, tenant string, from, to Policy, at time.Time) error {
	if from.Shadow != to.Shadow {
		return nil
	}
	tag, err := l.keys.tag(tenant)
	if err != nil {
		return err
	}
	// Buckets are paired with buckets, sliding windows with windows.
	olds, news := byPeriod(from.Limits.buckets()), byPeriod(to.Limits.buckets())
	wo, wn := byPeriod(from.Limits.windows()), byPeriod(to.Limits.windows())
	for i := range min(len(wo), len(wn)) {
		olds, news = append(olds, wo[i]), append(news, wn[i])
	}
	var errs []error
	now := "0"
	if !at.IsZero() {
		now = strconv.FormatInt(at.UnixMicro(), 10)
	}
	for i := range min(len(olds), len(news)) {
		o, n := olds[i], news[i]
		if o.Period == n.Period {
			continue
		}
		if err := n.Validate(); err != nil {
			return err
		}
		keys := []string{
			l.keys.prefix + ":" + tag + limitKeySuffix(o, to.Shadow),
			l.keys.prefix + ":" + tag + limitKeySuffix(n, to.Shadow),
		}
		v, err := l.lib.call(ctx, l.lib.carry, keys, now, strconv.FormatInt(o.periodMicros(), 10),
			strconv.FormatInt(n.Rate, 10), strconv.FormatInt(n.periodMicros(), 10), burstArg(n))
		if err == nil {
			err = replyStatus(l.lib.carry, keys[0], v)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	named := map[time.Duration]bool{}
	for _, n := range to.Limits.buckets() {
		named[n.Period] = true
	}
	for _, o := range from.Limits.buckets() {
		if named[o.Period] {
			continue
		}
		key := l.keys.prefix + ":" + tag + limitKeySuffix(o, from.Shadow)
		v, err := l.lib.call(ctx, l.lib.carry, []string{key}, now,
			strconv.FormatInt(o.Rate, 10), strconv.FormatInt(o.periodMicros(), 10), strconv.FormatInt(o.Burst, 10))
		if err == nil {
			err = replyStatus(l.lib.carry, key, v)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// byPeriod returns ls sorted by period, shortest first.
func byPeriod(ls Limits) Limits {
	out := slices.Clone(ls)
	slices.SortFunc(out, func(a, b Limit) int { return cmp.Compare(a.Period, b.Period) })
	return out
}

package throttle

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// Settle settles a job's cost after it ran, as Limiter.Settle does on its
// tenant's terms, and then on the terms of every level above the tenant
// it was decided at (WithLevels): its group's (Settlement.Group) and the
// global one, each once per job id under a marker of the level's own. A
// level that the job cost more goes into debt, and its next grants and
// calls wait until it is paid; one that it cost less gets the difference
// back, never above its bursts. A level's queue and fair places stay as
// they are: its tenants' turns were taken at the cost they declared.
//
// The levels are settled in one round trip after the tenant, a call each
// (on a Redis Cluster each level lives in a slot of its own). The result
// is the tenant's; a level's failure is returned with it, the settle of
// the others done: lost, a level's debt admits more for a while and its
// refund less (docs/design.md, "Settle").
func (d *Decider) Settle(ctx context.Context, s Settlement) (Settled, error) {
	if err := s.validate(); err != nil {
		return Settled{}, err // the settlement itself is invalid: no level either
	}
	out, err := d.l.Settle(ctx, s)
	if d.shared == nil {
		return out, err
	}
	// The levels are settled whatever the tenant's settle did: a tenant's
	// malformed state is no reason to leave a level undercharged.
	lerr := d.shared.settle(ctx, d.plan(Copy{Request: Request{Tenant: s.Tenant}, Group: s.Group}), s)
	return out, errors.Join(err, lerr)
}

// settle settles s on the terms of levels, in one round trip.
func (s *Shared) settle(ctx context.Context, levels []Level, st Settlement) error {
	charged := max(st.Charged, 1)
	if st.Cost == charged || len(levels) == 0 {
		return nil
	}
	now, err := micros(st.At)
	if err != nil {
		return err
	}
	slot, err := micros(st.Slot)
	if err != nil {
		return err
	}
	dir, diff := "1", st.Cost-charged
	if diff < 0 {
		dir, diff = "2", -diff
	}
	at := cmpTime(st.Slot, cmpTime(st.At, time.Now()))
	var calls []fcall
	for _, lv := range levels {
		pol := s.Policy(lv)
		if len(pol.Limits) == 0 {
			continue
		}
		keys, terms := s.levelCall(lv, pol, at)
		ttl := s.l.horizon + pol.Limits.longestFill() + paidMargin
		f := fcall{fn: s.l.lib.settle, keys: append([]string{s.l.keys.levels().settled(lv, st.JobID)}, keys[4:]...)}
		f.args = append([]any{strconv.FormatInt(now, 10), strconv.FormatInt(ttl.Milliseconds(), 10), dir,
			strconv.FormatInt(diff, 10), strconv.FormatInt(slot, 10), "0", s.l.horizonArg}, terms[1:]...)
		calls = append(calls, f)
	}
	if len(calls) == 0 {
		return nil
	}
	s.l.lib.run(ctx, calls)
	var errs []error
	for _, c := range calls {
		v, err := replyInts(c.cmd, c.fn, 4)
		if err == nil && v[0] != statusAdmitted {
			err = refusal(c, []any{v[0], v[1], v[2], v[3]})
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

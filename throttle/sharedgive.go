package throttle

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Grant is a level's pass that a job did not use: it was granted (or
// passed) the level, then another level or its tenant's own limits made
// it wait. GiveBack returns its charge.
type Grant struct {
	Level Level
	Job   LevelJob
	// Slot is when the level granted it.
	Slot time.Time
	// Refund gives the charge back; false only forgets a pass kept for a
	// job that then ran (LevelJob.Keep).
	Refund bool
	// OnlyUnused gives it back only while the pass is unused: a called
	// job that could not be woken may have come back by itself and run.
	OnlyUnused bool
}

// GiveBack returns the charges of grants that were not used, or forgets
// the passes of jobs that ran, in one round trip: the fair places of
// their flows move back by what they took. A failure leaves the charges
// spent: the level admits less for a moment, never more.
func (s *Shared) GiveBack(ctx context.Context, gs []Grant) error {
	if len(gs) == 0 {
		return nil
	}
	byLevel := map[Level][]Grant{}
	var order []Level
	for _, g := range gs {
		if _, ok := byLevel[g.Level]; !ok {
			order = append(order, g.Level)
		}
		byLevel[g.Level] = append(byLevel[g.Level], g)
	}
	var calls []fcall
	for _, lv := range order {
		pol := s.Policy(lv)
		keys, terms := s.levelCall(lv, pol, time.Now())
		keys = keys[1:] // no list
		for rest := byLevel[lv]; len(rest) > 0; {
			n := min(len(rest), maxJobsPerCall)
			args := append([]any{"0"}, terms...)
			for _, g := range rest[:n] {
				refund := "0"
				switch {
				case g.Refund && g.OnlyUnused && !pol.Shadow:
					refund = "2"
				case g.Refund && !pol.Shadow:
					refund = "1"
				}
				args = append(args, g.Job.member(), g.Job.Flow, strconv.FormatInt(max(g.Job.Cost, 1), 10),
					strconv.FormatInt(max(g.Job.Weight, 1), 10), strconv.FormatInt(max(g.Slot.UnixMicro(), 0), 10), refund)
			}
			calls = append(calls, fcall{fn: s.l.lib.unshare, keys: keys, args: args})
			rest = rest[n:]
		}
	}
	s.l.lib.run(ctx, calls)
	var errs []error
	for _, c := range calls {
		if err := c.cmd.Err(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return &RedisError{Op: "giving back shared grants", Err: errors.Join(errs...)}
	}
	for _, c := range calls {
		// A level whose stored state is malformed refuses the whole call
		// before its first write: nothing was given back.
		if t, ok := c.cmd.Val().([]any); ok {
			if refused := refusal(c, t); refused != nil {
				return fmt.Errorf("giving back shared grants: %w", refused)
			}
		}
	}
	return nil
}

// refusal is the error of a reply tuple that refuses a whole call:
// INVALID or WRONGTYPE.
func refusal(c fcall, t []any) error {
	v := make([]int64, 4)
	for i := range min(len(t), len(v)) {
		v[i], _ = t[i].(int64)
	}
	if v[0] == statusWrongType {
		return wrongType(c, v[1])
	}
	return replyStatus(c.fn, "", v)
}

// Forfeit gives back the turn a level's call gave w, a job that could not
// be woken (its parked copy gone: it came back by itself, or was purged),
// unless the job used it meanwhile: the level's room goes to the next.
func (s *Shared) Forfeit(ctx context.Context, w Waiter) error {
	lv, ok := ParseLevel(w.Level)
	if !ok {
		return nil // a running cap's waiter: nothing of a level's to give back
	}
	j := LevelJob{Tenant: w.Tenant, JobID: w.JobID, Flow: w.Tenant, Cost: max(w.Cost, 1), Weight: 1}
	return s.GiveBack(ctx, []Grant{{Level: lv, Job: j, Slot: time.Now(), Refund: true, OnlyUnused: true}})
}

package throttle

import (
	"context"
	"fmt"
	"time"
)

// WithLevels returns a Decider like d that first decides each copy at the
// limits above its tenant (Shared): its group's (Copy.Group), then the
// global one. A copy passes a level, or waits for its slot there
// (Reserved, uncharged by its tenant), or waits in the level's list for
// its turn (Queued). Only a copy that passed every level now is decided
// by its tenant's limits, caps and credits; when they make it wait, the
// levels' grants are given back (Shared.GiveBack).
func (d *Decider) WithLevels(s *Shared) *Decider {
	c := *d
	c.shared = s
	return &c
}

// levelPlan is what the levels decide of one copy.
type levelPlan struct {
	levels  []Level
	granted []Grant // the levels it passed in this call, for GiveBack
	queued  int     // the stage whose list it joined; -1 for none
	shadow  time.Duration
	level   string // the level of shadow
}

// plan returns the levels cp is decided at, in order: its group's and
// the global, those with limits.
func (d *Decider) plan(cp Copy) []Level {
	var out []Level
	if cp.Group != "" {
		if lv := (Level{Group: cp.Group}); len(d.shared.Policy(lv).Limits) > 0 {
			out = append(out, lv)
		}
	}
	if len(d.shared.Policy(Global).Limits) > 0 {
		out = append(out, Global)
	}
	return out
}

// levelJob is cp as a job at level k of its plan.
func (d *Decider) levelJob(cp Copy, levels []Level, k int) LevelJob {
	j := LevelJob{Tenant: cp.Tenant, JobID: cp.JobID, Flow: cp.Tenant, Cost: max(cp.Cost, 1), Weight: 1,
		Keep: k < len(levels)-1}
	if levels[k].Group == "" && cp.Group != "" {
		// At the global level the group takes turns, and its tenants
		// take the group's in turn (lua/groups.lua, GROUPS AT THE GLOBAL
		// LEVEL).
		j.Flow = cp.Group
	}
	if w := d.l.policies.Policy(cp.Tenant).Weight; w > 1 {
		j.Weight = w
	}
	return j
}

// decideLevels is DecideBatch with levels above the tenant.
func (d *Decider) decideLevels(ctx context.Context, copies []Copy) []Result {
	out := make([]Result, len(copies))
	plans := make([]levelPlan, len(copies))
	done := make([]bool, len(copies))
	var called []Waiter
	var waiting []int // the copies a level made wait
	for stage := 0; ; stage++ {
		var idx []int
		var lvs []Level
		var js []LevelJob
		for i, cp := range copies {
			if stage == 0 {
				plans[i].levels, plans[i].queued = d.plan(cp), -1
			}
			if done[i] || stage >= len(plans[i].levels) {
				continue
			}
			lv := plans[i].levels[stage]
			if most := d.shared.Policy(lv).Limits.MinBurst(); max(cp.Cost, 1) > most {
				// Never admissible there: refused before any call, naming
				// the level, as a tenant's limit refuses it.
				out[i].Err = &InvalidError{Code: CodeCostOverBurst, Detail: fmt.Sprintf("cost %d, smallest burst %d of %s", max(cp.Cost, 1), most, lv)}
				done[i] = true
				continue
			}
			idx = append(idx, i)
			lvs = append(lvs, plans[i].levels[stage])
			js = append(js, d.levelJob(cp, plans[i].levels, stage))
		}
		if len(idx) == 0 {
			break
		}
		ds, errs, c := d.shared.Decide(ctx, lvs, js)
		called = append(called, c...)
		now := time.Now()
		for k, i := range idx {
			p := &plans[i]
			name := lvs[k].String()
			switch {
			case errs[k] != nil:
				out[i].Err, done[i] = errs[k], true
			case !ds[k].Passed:
				out[i].Decision, done[i] = Decision{Outcome: Queued, Ahead: ds[k].Ahead, LevelName: name}, true
				waiting = append(waiting, i)
				p.queued = stage
			case ds[k].Wait > 0:
				out[i].Decision, done[i] = Decision{Outcome: Reserved, Wait: ds[k].Wait, LevelName: name}, true
				waiting = append(waiting, i)
			default:
				p.granted = append(p.granted, Grant{Level: lvs[k], Job: js[k], Slot: now, Refund: true})
				if ds[k].ShadowWait > p.shadow {
					p.shadow, p.level = ds[k].ShadowWait, name
				}
			}
		}
	}
	// Parked or moved, a copy that waits at a level is carried on by
	// another incarnation: its own owner record, if any, must go.
	giveUpOwners(ctx, d.l, copies, out, waiting)
	var pass []int
	for i := range copies {
		if !done[i] {
			pass = append(pass, i)
		}
	}
	back := d.unkeep(copies, plans, time.Now())
	if len(pass) > 0 {
		sub := make([]Copy, len(pass))
		for k, i := range pass {
			sub[k] = copies[i]
		}
		rs := d.decideTenants(ctx, sub)
		for k, i := range pass {
			out[i] = rs[k]
			p := plans[i]
			ran := rs[k].Err == nil && rs[k].Outcome == Admitted
			if ran && p.shadow > out[i].ShadowWait {
				out[i].ShadowWait, out[i].LevelName = p.shadow, p.level
			}
			for _, g := range p.granted {
				if !ran {
					back = append(back, g)
				} else if g.Job.Keep {
					g.Refund = false // its pass was kept: forget it
					back = append(back, g)
				}
			}
		}
	}
	// Given back in a round trip of its own; a failure leaves the charges
	// spent: the levels admit less for a moment, never more.
	_ = d.shared.GiveBack(ctx, back)
	if len(called) > 0 && len(out) > 0 {
		out[0].Called = append(out[0].Called, called...)
	}
	return out
}

// unkeep returns what the copies that joined a level's list give back,
// so that no level keeps a charge for a job waiting in another's list:
// the passes the levels before gave it (a job queued at the global level
// keeps no pass of its group's; called, it is decided by its group
// again), and the unused passes it holds at the levels after (a job
// called by the global level, then queued by its group, gives the call
// back). Kept, a group's passes pile up while the global level binds, as
// fast as the group grants beyond its share of the global, and are used
// on top of the group's new grants once the global stops binding; a
// global call kept by a job its group queues is used late, on top of the
// global's later grants. A job given a slot a short way ahead (Reserved)
// keeps what it holds: it comes back within the direct lookahead. While
// both levels bind a job may go round between their lists more than
// once, each time first in the fair order of both.
func (d *Decider) unkeep(copies []Copy, plans []levelPlan, now time.Time) []Grant {
	var out []Grant
	for i, p := range plans {
		if p.queued < 0 {
			continue
		}
		out = append(out, p.granted...)
		for k := p.queued + 1; k < len(p.levels); k++ {
			out = append(out, Grant{Level: p.levels[k], Job: d.levelJob(copies[i], p.levels, k), Slot: now, Refund: true, OnlyUnused: true})
		}
	}
	return out
}

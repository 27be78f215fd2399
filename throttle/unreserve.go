package throttle

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Slot names one job's reserved slot: its tenant and job id, and, for
// the levels above the tenant, its group ("" for none) and cost (0 or 1
// for one token).
type Slot struct {
	Tenant, JobID string
	Group         string
	Cost          int64
}

// Unreserve gives up the slots the jobs hold, so that each, back, is
// decided anew: charged then, as a job that never held one. The charge
// each paid its tenant's buckets for its slot stays spent (a bucket in
// debt stays so). The worker calls it for the jobs of a paused tenant,
// whose slots would otherwise all come due during the pause and run at
// once on resume, on top of the burst the tenant's buckets filled to. One
// pipelined round trip of plain DELs: each key is the job's own, so no
// condition is needed.
//
// With levels above the tenant (WithLevels), each job also gives back the
// pass a level granted it, if unused, with its charge (Shared.GiveBack,
// one more round trip): a paused tenant's jobs called in their turns
// would otherwise take the level's room from the other tenants during the
// pause, then all pass at once on resume.
func (d *Decider) Unreserve(ctx context.Context, slots []Slot) error {
	if len(slots) == 0 {
		return nil
	}
	var levelErr error
	if d.shared != nil {
		levelErr = d.giveBackPasses(ctx, slots)
	}
	if err := d.unreserveTenants(ctx, slots); err != nil {
		return errors.Join(err, levelErr)
	}
	return levelErr
}

// giveBackPasses gives back, at every level of each slot's job, the pass
// it holds unused, with its charge.
func (d *Decider) giveBackPasses(ctx context.Context, slots []Slot) error {
	var gs []Grant
	now := time.Now()
	for _, s := range slots {
		cp := Copy{Request: Request{Tenant: s.Tenant, JobID: s.JobID, Cost: max(s.Cost, 1)}, Group: s.Group}
		levels := d.plan(cp)
		for k, lv := range levels {
			gs = append(gs, Grant{Level: lv, Job: d.levelJob(cp, levels, k), Slot: now, Refund: true, OnlyUnused: true})
		}
	}
	return d.shared.GiveBack(ctx, gs)
}

// unreserveTenants deletes the slots' reservations by their tenants.
func (d *Decider) unreserveTenants(ctx context.Context, slots []Slot) error {
	pipe := d.l.lib.rdb.Pipeline()
	for _, s := range slots {
		if err := validJobID(s.JobID); err != nil {
			return err
		}
		tag, err := d.l.keys.tag(s.Tenant)
		if err != nil {
			return err
		}
		pipe.Del(ctx, d.l.keys.reservation(tag, s.JobID))
	}
	cmds, err := pipe.Exec(ctx)
	var errs []error
	for _, cmd := range cmds {
		if cmd.Err() != nil {
			errs = append(errs, cmd.Err())
		}
	}
	if err != nil && len(errs) == 0 {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return &RedisError{Op: "unreserve", Err: fmt.Errorf("%d of %d slots: %w", len(errs), len(slots), errors.Join(errs...))}
	}
	return nil
}

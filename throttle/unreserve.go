package throttle

import (
	"context"
	"errors"
	"fmt"
)

// Slot names one job's reserved slot: its tenant and job id.
type Slot struct {
	Tenant, JobID string
}

// Unreserve gives up the slots the jobs hold, so that each, back, is
// decided anew: charged then, as a job that never held one. The charge
// each paid for its slot stays spent (a bucket in debt stays so): nothing
// is ever granted back. The worker calls it for the jobs of a paused
// tenant, whose slots would otherwise all come due during the pause and
// run at once on resume, on top of the burst the tenant's buckets filled
// to. One pipelined round trip of plain DELs: each key is the job's own,
// so no condition is needed.
func (d *Decider) Unreserve(ctx context.Context, slots []Slot) error {
	if len(slots) == 0 {
		return nil
	}
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

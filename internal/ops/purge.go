package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/throttler/throttler/tenant"
	"github.com/throttler/throttler/throttle"
)

// Unwaiter removes jobs from the running caps' waiting lists;
// *throttle.Limiter satisfies it.
type Unwaiter interface {
	Unwait(ctx context.Context, tenant string, jobIDs []string) (int, error)
}

// Unqueuer removes jobs from the waiting lists of the levels above the
// tenant (a group's, the global); *throttle.Limiter satisfies it.
type Unqueuer interface {
	Unqueue(ctx context.Context, tenant string, jobs []throttle.QueuedJob) (int, error)
}

// PurgeOptions says whose waiting jobs PurgeTenant removes.
type PurgeOptions struct {
	// Tenant owns the jobs. Required.
	Tenant string
	// Before, when set, selects only the jobs first published before it
	// (--older-than D is now − D).
	Before time.Time
	// DryRun removes nothing: the report counts what a purge would remove.
	DryRun bool
	// Waiting, when set, removes the purged parked jobs from the caps'
	// waiting lists; without it their places are called in turn and,
	// found empty, handed on (consumer.Waker), which slows the tenant's
	// later jobs under its cap for a while.
	Waiting Unwaiter
	// Levels, when set, removes the purged jobs parked for a turn under a
	// level from its waiting list; without it their places are called in
	// turn and, found empty, handed on, which takes the level's room from
	// the other tenants for as long as the purged backlog takes to call.
	Levels Unqueuer
}

// PurgeReport counts the jobs a purge removed (in a dry run, would
// remove), by where they waited.
type PurgeReport struct {
	Tenant string `json:"tenant"`
	DryRun bool   `json:"dry_run"`
	// Pending were stored on a job subject and not yet delivered by the
	// jobs consumer (moved jobs come back there too).
	Pending int `json:"pending"`
	// Moved waited in schedules: scheduled copies and the jobs bundles
	// carry.
	Moved int `json:"moved"`
	// Parked waited for a lease under a running cap.
	Parked int `json:"parked"`
	// Fast were the fast lane's copies, not yet delivered.
	Fast int `json:"fast"`
	// Woken were parked jobs woken in their turn, not yet delivered.
	Woken int `json:"woken"`
	// Removed is the sum of the above.
	Removed int `json:"removed"`
	// Charged counts the removed jobs that held a slot their tenant was
	// charged for: moved to wait for it under the tenant's limits, and
	// the fast lane's copies. Their charges stay spent (as if they ran);
	// paused jobs, and those waiting for credits, a lease or a turn, were
	// not charged.
	Charged int `json:"charged"`
	// InFlight counts the tenant's jobs delivered to a worker and perhaps
	// not yet acked (running, NAK'd to wait, or just decided), which a
	// purge never removes: at most that many, since the consumer does not
	// say which of the jobs it delivered past its ack floor are done.
	InFlight int `json:"in_flight"`
	// Unwaited counts the places removed from the caps' waiting lists.
	Unwaited int `json:"unwaited"`
	// Unqueued counts the places removed from the waiting lists of the
	// levels above the tenant (jobs parked for a turn, counted in Moved).
	Unqueued int `json:"unqueued"`
	// Passes is how many times the purge looked: jobs move while it runs
	// (a schedule fires, a bundle is unpacked), so it looks again until a
	// pass finds nothing more, at most maxPasses times.
	Passes int `json:"passes"`
	// Warnings say what went wrong without failing the purge.
	Warnings []string `json:"warnings,omitempty"`
}

// maxPasses bounds the passes of a purge.
const maxPasses = 5

// PurgeTenant removes the tenant's waiting jobs: those stored and not yet
// delivered on a job subject, moved (scheduled copies and bundles), parked
// under a running cap, and the fast lane's and woken copies not yet
// delivered. It never removes another tenant's job, a job done (which the
// stream may keep), nor one delivered to a worker and not acked: those
// count as InFlight. A job delivered in the moment between the purge's
// read of its consumer's position and the delete may still run; the purge
// reads the position again every purgeRecheck deletes to keep that
// moment short.
//
// With Before, a bundle holding jobs on both sides of it is replaced by
// the scheduled copies of the jobs it keeps, as the unbundler would make
// them.
func PurgeTenant(ctx context.Context, fl Fleet, opts PurgeOptions) (PurgeReport, error) {
	rep := PurgeReport{Tenant: opts.Tenant, DryRun: opts.DryRun}
	if err := tenant.Validate(opts.Tenant); err != nil {
		return rep, fmt.Errorf("%w: tenant: %w", ErrBadInput, err)
	}
	p, err := newPurge(ctx, fl, opts)
	if err != nil {
		return rep, err
	}
	for rep.Passes < maxPasses {
		rep.Passes++
		var pass PurgeReport
		if err := p.pass(ctx, &pass); err != nil {
			return rep, err
		}
		rep.Pending += pass.Pending
		rep.Moved += pass.Moved
		rep.Parked += pass.Parked
		rep.Fast += pass.Fast
		rep.Woken += pass.Woken
		rep.Charged += pass.Charged
		rep.Unwaited += pass.Unwaited
		rep.Unqueued += pass.Unqueued
		rep.Warnings = append(rep.Warnings, pass.Warnings...)
		rep.InFlight = pass.InFlight
		n := pass.Pending + pass.Moved + pass.Parked + pass.Fast + pass.Woken
		rep.Removed += n
		if n == 0 || opts.DryRun {
			break
		}
	}
	return rep, nil
}

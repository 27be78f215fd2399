package consumer

import (
	"context"
	"log/slog"
	"time"

	"github.com/throttler/throttler/throttle"
)

// Settler settles a job's cost after it ran (throttle.Decider.Settle: its
// tenant's terms and its levels'); *throttle.Limiter (the tenant's alone)
// and *throttle.Decider satisfy it.
type Settler interface {
	// Settle settles the difference between the cost a job was charged
	// and the one it reports, once per job id.
	Settle(ctx context.Context, s throttle.Settlement) (throttle.Settled, error)
}

// ignoredCosts is the Settler of a worker given none: a cost a handler
// reports is not settled, and the job was charged its Job.Cost.
type ignoredCosts struct{}

// Settle implements Settler: it applies nothing.
func (ignoredCosts) Settle(context.Context, throttle.Settlement) (throttle.Settled, error) {
	return throttle.Settled{}, nil
}

// costSettler settles the cost a succeeded job reported (SettleCost): one
// Redis call when it differs from Job.Cost, none otherwise. A debt moves
// the tenant's reserved slots in Redis (throttle.Settled.Shift): nothing
// is held in the worker. A settle that fails is logged and counted, never
// the job's failure: the job ran.
type costSettler struct {
	settler Settler // ignoredCosts without a Settler
	rec     *recorder
	timeout time.Duration // Config.RedisTimeout
	log     *slog.Logger
}

// settle settles the cost job's handler reported; admitted is when the
// job was admitted (its slot, for the calendar and sliding windows).
func (c *costSettler) settle(ctx context.Context, job Job, admitted time.Time, cost int64) {
	charged := max(job.Cost, 1)
	if cost == charged {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	out, err := c.settler.Settle(sctx, throttle.Settlement{Tenant: job.Tenant, JobID: job.ID, Charged: charged, Cost: cost, Slot: admitted, Group: job.Group})
	if err != nil {
		// Lost: a debt admits more, a refund less (docs/design.md, SETTLE).
		c.rec.add(job.Tenant, func(s *TenantStats) { s.RedisErrors++ })
		c.log.Warn("settling a job's cost failed; the job ran and is acked", "tenant", job.Tenant, "job", job.ID,
			"charged", charged, "cost", cost, "err", err)
		return
	}
	if !out.Applied {
		return
	}
	c.rec.add(job.Tenant, func(s *TenantStats) {
		s.SettledCharged += out.Charged
		s.SettledRefunded += out.Refunded
	})
}

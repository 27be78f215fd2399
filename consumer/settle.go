package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/throttler/throttler/throttle"
)

// ErrNoCostReport is SettleCost's error outside a worker's handler: no
// worker is there to settle the cost.
var ErrNoCostReport = errors.New("consumer: SettleCost called outside a worker's handler")

// SettleCost reports the actual cost of the job whose handler ctx belongs
// to, when it is known only once the job ran (tokens an LLM call used,
// rows an export wrote): a whole number from 0 to throttle.MaxBurst. Call
// it before the handler returns nil; the last call wins. Once the handler
// succeeds, the worker settles the difference from the cost the job was
// charged (Job.Cost) on every term of its tenant's policy
// (throttle.Limiter.Settle), and of the levels above it (a global or group
// limit: throttle.Decider.Settle): more is charged as debt, which the tenant's
// jobs decided after it wait out, and which moves the slots reserved
// before it later, each keeping its charge; less is given back. Jobs
// already admitted start (docs/design.md, "Settle"). A
// handler that fails or asks to wait settles nothing. Outside a worker's
// handler it returns ErrNoCostReport.
func SettleCost(ctx context.Context, cost int64) error {
	rep, ok := ctx.Value(costKey{}).(*costReport)
	if !ok || rep == nil {
		return ErrNoCostReport
	}
	if cost < 0 || cost > throttle.MaxBurst {
		return fmt.Errorf("consumer: SettleCost: cost %d out of range [0, %d]", cost, throttle.MaxBurst)
	}
	rep.mu.Lock()
	rep.set, rep.cost = true, cost
	rep.mu.Unlock()
	return nil
}

// costKey is the context key of a handler's costReport.
type costKey struct{}

// costReport holds the cost a handler reported with SettleCost.
type costReport struct {
	mu   sync.Mutex
	set  bool
	cost int64
}

// reported returns the cost reported, if any.
func (r *costReport) reported() (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cost, r.set
}

// withCostReport returns ctx carrying a new costReport for one handler
// call, and the report.
func withCostReport(ctx context.Context) (context.Context, *costReport) {
	rep := &costReport{}
	return context.WithValue(ctx, costKey{}, rep), rep
}

// Settler settles a job's cost after it ran (throttle.Decider.Settle: its
// tenant's terms and its levels'); *throttle.Limiter (the tenant's alone)
// and *throttle.Decider satisfy it.
type Settler interface {
	// Settle settles the difference between the cost a job was charged
	// and the one it reports, once per job id.
	Settle(ctx context.Context, s throttle.Settlement) (throttle.Settled, error)
}

// costSettler settles the cost a succeeded job reported (SettleCost): one
// Redis call when it differs from Job.Cost, none otherwise. A debt moves
// the tenant's reserved slots in Redis (throttle.Settled.Shift): nothing
// is held in the worker. A settle that fails is logged and counted, never
// the job's failure: the job ran.
type costSettler struct {
	settler Settler // nil: reports are ignored
	rec     *recorder
	timeout time.Duration // Config.RedisTimeout
	log     *slog.Logger
}

// settle settles job's reported cost, if any; admitted is when the job
// was admitted (its slot, for the calendar and sliding windows).
func (c *costSettler) settle(ctx context.Context, job Job, admitted time.Time, rep *costReport) {
	cost, ok := rep.reported()
	charged := max(job.Cost, 1)
	if !ok || cost == charged || c.settler == nil {
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

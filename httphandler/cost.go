package httphandler

import (
	"context"
	"strconv"
	"strings"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/throttle"
)

// HeaderCost, on a 2xx answer, carries the job's actual cost, known only
// once it ran: a whole number from 0 to throttle.MaxBurst (digits only).
// The worker settles the difference from the cost the job was charged
// (consumer.SettleCost). A value that is not one is logged, once per
// tenant, and ignored: the job succeeded all the same.
const HeaderCost = "Throttler-Cost"

// reportCost reports the cost a 2xx answer's HeaderCost values carry, if
// any, for job.
func (h *Handler) reportCost(ctx context.Context, job consumer.Job, values []string) {
	if len(values) == 0 {
		return
	}
	cost, ok := parseCost(values)
	if !ok {
		if _, warned := h.badCost.LoadOrStore(job.Tenant, true); !warned {
			h.opts.Logger.Warn("the endpoint's "+HeaderCost+" is not a whole number from 0 to 1e9; ignored "+
				"(logged once per tenant)", "tenant", job.Tenant, "job", job.ID, "value", strings.Join(values, ", "))
		}
		return
	}
	// Outside a worker (ErrNoCostReport) there is nothing to settle.
	_ = consumer.SettleCost(ctx, cost)
}

// parseCost reads one HeaderCost value: digits only, at most
// throttle.MaxBurst.
func parseCost(values []string) (int64, bool) {
	if len(values) != 1 {
		return 0, false
	}
	v := values[0]
	if v == "" || len(v) > 10 || strings.Trim(v, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n > throttle.MaxBurst {
		return 0, false
	}
	return n, true
}

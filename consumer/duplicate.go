package consumer

import (
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/throttle"
)

// duplicates is the stage of a moved job another incarnation of which
// already ran (throttle.Duplicate, not the lane's claim): it is acked
// unrun.
type duplicates struct {
	rec *recorder
	log *slog.Logger
}

func (d duplicates) take(_ *groupActs, it *item, res throttle.Result) bool {
	// Expected after a job was brought back, or redelivered, while a copy
	// of it waited: the owner record lets one run. Not a fault.
	d.log.Info("another copy of a moved job ran already; acking this one without running", "tenant", it.job.Tenant, "job", it.job.ID,
		"incarnation", incarnation(it.job), "moves", it.job.Deferrals, "owner", res.Owner)
	d.rec.add(it.job.Tenant, func(s *TenantStats) { s.Duplicates++ })
	settleOrLog(d.log, it.msg, func(m jetstream.Msg) error { return m.Ack() })
	return true
}

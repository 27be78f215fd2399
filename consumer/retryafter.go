package consumer

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// RetryAfter, returned by a Handler (as *RetryAfter, possibly wrapped),
// says the job's destination asked the worker to wait until Until before
// sending it, or anything else of its tenant (HTTP 429, or 503 with
// Retry-After). It is not a failure of the job: the job is deferred until
// then, uncounted, with the reason "downstream asked to wait until …"; and,
// with a Holder, the tenant is held back fleet-wide until then, so no
// worker starts another of its jobs. Until is capped at Config.MaxHold.
type RetryAfter struct {
	// Until is when the destination takes jobs again.
	Until time.Time
	// Reason says what the destination answered, for the logs and the
	// deferred copy's Throttler-Wait-Reason.
	Reason string
}

// Error says when the destination takes jobs again, and why.
func (e *RetryAfter) Error() string {
	s := "downstream asked to wait until " + e.Until.UTC().Format(time.RFC3339Nano)
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Holder holds a tenant back fleet-wide while its downstream asks the
// worker to wait, and gives up the owner record of the job that was told
// to wait, so that its deferred copy may run; *throttle.Holds satisfies
// it.
type Holder interface {
	// Hold makes the tenant's buckets empty until until at the earliest.
	Hold(ctx context.Context, tenant string, until time.Time) error
	// Release deletes the job's owner record if it names incarnation.
	Release(ctx context.Context, tenant, jobID string, incarnation int64) (bool, error)
}

// asRetryAfter returns the RetryAfter err is or wraps, or nil.
func asRetryAfter(err error) *RetryAfter {
	var ra *RetryAfter
	if errors.As(err, &ra) && ra != nil {
		return ra
	}
	return nil
}

// holdOff settles a job whose handler returned ra: it holds the tenant
// back until ra.Until (at most MaxHold from now), counts and logs it, and
// defers the job until then without counting a failure.
func (s *deferSettler) holdOff(ctx context.Context, f *flight, job Job, ra *RetryAfter) {
	now := s.cfg.Now()
	until := ra.Until
	if latest := now.Add(s.cfg.MaxHold); until.After(latest) {
		until = latest
	}
	wait := max(0, until.Sub(now))
	// The tenant's jobs this worker and the others admitted before the
	// hold must not start before until either.
	s.holds.record(job.Tenant, until)
	// The owner record is known not to name this incarnation.
	released := s.holds.holdFleet(ctx, job, until)
	// Counted once the tenant is held, so a count seen means the hold is in.
	s.stats.Add(job.Tenant, func(s *TenantStats) { s.DownstreamHolds++ })
	s.log.Info("downstream asked to wait; holding the tenant", "tenant", job.Tenant, "job", job.ID,
		"until", until.UTC().Format(time.RFC3339Nano), "wait", wait, "reason", ra.Reason)
	if !released {
		// The owner record may still name this incarnation, and a moved
		// copy would then be taken for a duplicate: NAK.
		f.settle(func(m jetstream.Msg) error { return m.NakWithDelay(wait) })
		return
	}
	if f.settled.CompareAndSwap(false, true) {
		reason := "downstream asked to wait until " + until.UTC().Format(time.RFC3339Nano)
		if ra.Reason != "" {
			reason += ": " + ra.Reason
		}
		ds := []Deferral{{Msg: f.msg, Job: job, Wait: wait, Reason: reason}}
		s.deferrer.Defer(ctx, ds)
		s.deferred(ds[0])
	}
}

package consumer

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/tenant"
)

// downstreamHolds keeps the holds downstreams asked for (RetryAfter), as
// this worker heard them, from its own handlers or from another worker's
// (Config.HoldSubject), and holds a tenant back fleet-wide with a Holder.
// The throttle's Hold stops new admissions; the holds kept here stop the
// jobs admitted before it, waiting for a handler slot or back for slots
// reserved before it, from starting.
type downstreamHolds struct {
	holder  Holder // nil without one: a job told to wait keeps its owner record
	js      jetstream.JetStream
	subject string           // Config.HoldSubject, "" for none
	timeout time.Duration    // Config.RedisTimeout, for each Holder call
	now     func() time.Time // Config.Now
	maxHold time.Duration    // Config.MaxHold: the longest hold a downstream gets
	// deferFlight defers an admitted job held back (deferSettler's).
	deferFlight func(ctx context.Context, f *flight, d Deferral, released bool)
	rec         *recorder
	log         *slog.Logger
	until       latestTimes // each tenant held, until when
	// last is the latest end of a hold recorded, ns since the epoch: past
	// it no tenant is held, and a job about to start is let through
	// without taking until's lock, as nearly every job is.
	last atomic.Int64
}

// record notes that tenant is held until until, and tells the fleet.
func (h *downstreamHolds) record(tenant string, until time.Time) {
	h.note(tenant, until)
	h.announce(tenant, until)
}

// note notes that tenant is held until until. The first hold after every
// earlier one ended forgets those: after no longer looks them up.
func (h *downstreamHolds) note(tenant string, until time.Time) {
	if now := h.now(); now.UnixNano() >= h.last.Load() {
		h.until.since(now)
	}
	h.until.record(tenant, until)
	ns := until.UnixNano()
	for {
		last := h.last.Load()
		if ns <= last || h.last.CompareAndSwap(last, ns) {
			return
		}
	}
}

// after returns until when tenant is held, if past now.
func (h *downstreamHolds) after(tenant string, now time.Time) (time.Time, bool) {
	if now.UnixNano() >= h.last.Load() {
		return time.Time{}, false
	}
	return h.until.after(tenant, now)
}

// keys returns the tenants held past now.
func (h *downstreamHolds) keys(now time.Time) []string { return h.until.keys(now) }

// announce tells every worker of the fleet that tenant is held until
// until, on Config.HoldSubject. It is best effort: a worker that misses it
// starts only the tenant's jobs admitted before the hold.
func (h *downstreamHolds) announce(tenant string, until time.Time) {
	if h.subject == "" {
		return
	}
	nc := h.js.Conn()
	if nc == nil {
		return
	}
	msg := tenant + " " + strconv.FormatInt(until.UnixMicro(), 10)
	if err := nc.Publish(h.subject, []byte(msg)); err != nil {
		h.log.Warn("telling the other workers of a hold failed", "tenant", tenant, "err", err)
	}
}

// holdsQuery, published on Config.HoldSubject, asks every worker to
// announce again the holds it knows. A worker asks when it starts: a
// hold announced before then would otherwise never reach it, and during
// a rolling deploy or a restart it would start the held tenant's jobs
// whose slots were reserved before the hold. A worker of a version that
// does not know the query ignores it as no tenant's hold.
const holdsQuery = "?"

// listen records the holds other workers announce on Config.HoldSubject,
// after asking them for those they already know, and answers the workers
// that ask, until the returned stop is called. A worker has it when it
// has a HoldSubject and a connection to publish on.
func (h *downstreamHolds) listen(_, _ context.Context) (stop func()) {
	nc := h.js.Conn()
	sub, err := nc.Subscribe(h.subject, func(m *nats.Msg) {
		if string(m.Data) == holdsQuery {
			h.announceAll()
			return
		}
		t, at, ok := strings.Cut(string(m.Data), " ")
		us, err := strconv.ParseInt(at, 10, 64)
		if !ok || err != nil || tenant.Validate(t) != nil {
			return
		}
		h.note(t, time.UnixMicro(us))
	})
	if err != nil {
		h.log.Warn("listening for other workers' holds failed; only this worker's own holds stop its admitted jobs", "err", err)
		return func() {}
	}
	// The server takes the subscription before the query, sent after it
	// on the same connection, so every answer reaches this worker.
	if err := nc.Publish(h.subject, []byte(holdsQuery)); err != nil {
		h.log.Warn("asking the other workers for their holds failed; holds announced before this worker started do not stop its admitted jobs", "err", err)
	}
	return func() { _ = sub.Unsubscribe() }
}

// announceAll announces again every hold this worker knows that has not
// ended.
func (h *downstreamHolds) announceAll() {
	now := h.now()
	for _, t := range h.until.keys(now) {
		if until, held := h.until.after(t, now); held {
			h.announce(t, until)
		}
	}
}

// holdFleet holds job's tenant back fleet-wide until until and gives up
// job's owner record, logging what failed. It reports whether the owner
// record is known not to name job's incarnation (false without a Holder).
func (h *downstreamHolds) holdFleet(ctx context.Context, job Job, until time.Time) (released bool) {
	if h.holder == nil {
		return false
	}
	hctx, cancel := context.WithTimeout(ctx, h.timeout)
	if err := h.holder.Hold(hctx, job.Tenant, job.ID, until); err != nil {
		// The job still waits; other workers may start the tenant's
		// jobs meanwhile and be told to wait too.
		h.log.Warn("holding a tenant failed", "tenant", job.Tenant, "job", job.ID, "err", err)
	}
	_, err := h.holder.Release(hctx, job.Tenant, job.ID, incarnation(job))
	cancel()
	if err != nil {
		h.log.Warn("giving up a held job's owner record failed; deferring it with NAK", "tenant", job.Tenant, "job", job.ID, "err", err)
	}
	return err == nil
}

// release gives up job's owner record. It reports whether the record is
// known not to name job's incarnation (false without a Holder).
func (h *downstreamHolds) release(ctx context.Context, job Job) bool {
	if h.holder == nil {
		return false
	}
	hctx, cancel := context.WithTimeout(ctx, h.timeout)
	_, err := h.holder.Release(hctx, job.Tenant, job.ID, incarnation(job))
	cancel()
	return err == nil
}

// holdOff settles a job whose handler returned ra: it holds the tenant
// back until ra.Until (at most MaxHold from now), counts and logs it, and
// defers the job until then without counting a failure.
func (h *downstreamHolds) holdOff(ctx context.Context, f *flight, job Job, ra *RetryAfter) {
	now := h.now()
	until := ra.Until
	if until.IsZero() {
		until = now.Add(ra.After)
	}
	if latest := now.Add(h.maxHold); until.After(latest) {
		until = latest
	}
	wait := max(0, until.Sub(now))
	// The tenant's jobs this worker and the others admitted before the
	// hold must not start before until either.
	h.record(job.Tenant, until)
	// The owner record is known not to name this incarnation.
	released := h.holdFleet(ctx, job, until)
	// Counted once the tenant is held, so a count seen means the hold is in.
	h.rec.add(job.Tenant, func(s *TenantStats) { s.DownstreamHolds++ })
	h.log.Info("downstream asked to wait; holding the tenant", "tenant", job.Tenant, "job", job.ID,
		"until", until.UTC().Format(time.RFC3339Nano), "wait", wait, "reason", ra.Reason)
	reason := "downstream asked to wait until " + until.UTC().Format(time.RFC3339Nano)
	if ra.Reason != "" {
		reason += ": " + ra.Reason
	}
	h.deferFlight(ctx, f, Deferral{Job: job, Wait: wait, Reason: reason}, released)
}

// waitOut settles an admitted job whose tenant is held until until,
// instead of running it: deferred until then, as holdOff defers the job
// the downstream answered, uncounted. Its admission's charge is spent: back,
// it is decided again, and never over-admitted.
func (h *downstreamHolds) waitOut(ctx context.Context, f *flight, job Job, until time.Time) {
	wait := max(0, until.Sub(h.now()))
	h.deferFlight(ctx, f, Deferral{Job: job, Wait: wait,
		Reason: "tenant held: downstream asked to wait until " + until.UTC().Format(time.RFC3339Nano)}, h.release(ctx, job))
}

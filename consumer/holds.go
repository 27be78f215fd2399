package consumer

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/throttler/throttler/tenant"
)

// announceHold tells every worker of the fleet that tenant is held until
// until, on Config.HoldSubject. It is best effort: a worker that misses it
// starts only the tenant's jobs admitted before the hold.
func (w *Worker) announceHold(tenant string, until time.Time) {
	if w.cfg.HoldSubject == "" {
		return
	}
	nc := w.js.Conn()
	if nc == nil {
		return
	}
	msg := tenant + " " + strconv.FormatInt(until.UnixMicro(), 10)
	if err := nc.Publish(w.cfg.HoldSubject, []byte(msg)); err != nil {
		w.log.Warn("telling the other workers of a hold failed", "tenant", tenant, "err", err)
	}
}

// listenForHolds records the holds other workers announce on
// Config.HoldSubject until the returned stop is called.
func (w *Worker) listenForHolds() (stop func()) {
	if w.cfg.HoldSubject == "" || w.js.Conn() == nil {
		return func() {}
	}
	sub, err := w.js.Conn().Subscribe(w.cfg.HoldSubject, func(m *nats.Msg) {
		t, at, ok := strings.Cut(string(m.Data), " ")
		us, err := strconv.ParseInt(at, 10, 64)
		if !ok || err != nil || tenant.Validate(t) != nil {
			return
		}
		w.holds.record(t, time.UnixMicro(us))
	})
	if err != nil {
		w.log.Warn("listening for other workers' holds failed; only this worker's own holds stop its admitted jobs", "err", err)
		return func() {}
	}
	return func() { _ = sub.Unsubscribe() }
}

// waitOutHold settles an admitted job whose tenant is held until until,
// instead of running it: deferred until then, as holdOff defers the job
// the downstream answered, uncounted. Its admission's charge is spent: back,
// it is decided again, and never over-admitted.
func (w *Worker) waitOutHold(ctx context.Context, f *flight, job Job, until time.Time) {
	wait := max(0, until.Sub(w.cfg.Now()))
	released := false
	if w.holder != nil {
		hctx, cancel := context.WithTimeout(ctx, w.cfg.RedisTimeout)
		_, err := w.holder.Release(hctx, job.Tenant, job.ID, incarnation(job))
		cancel()
		released = err == nil
	}
	if !released {
		f.settle(func(m jetstream.Msg) error { return m.NakWithDelay(wait) })
		return
	}
	if f.settled.CompareAndSwap(false, true) {
		ds := []Deferral{{Msg: f.msg, Job: job, Wait: wait,
			Reason: "tenant held: downstream asked to wait until " + until.UTC().Format(time.RFC3339Nano)}}
		w.deferrer.Defer(ctx, ds)
		w.deferred(ds[0])
	}
}

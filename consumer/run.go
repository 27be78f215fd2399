package consumer

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"
)

// run calls the handler, keeps the job alive while it runs, and settles it.
func (w *Worker) run(workCtx context.Context, f *flight, job Job) {
	w.observeStart(job)
	began := time.Now()
	err := w.callHandler(workCtx, job)
	w.obs.ObserveHandler(time.Since(began))
	if err == nil {
		if f.settle(func(m jetstream.Msg) error { return m.Ack() }) {
			w.stats.Add(job.Tenant, func(s *TenantStats) { s.Completed++ })
		}
		return
	}
	if workCtx.Err() != nil {
		// Shutdown cancelled the job: not its failure. Hand it back.
		f.settle(func(m jetstream.Msg) error { return m.Nak() })
		return
	}
	if ra := asRetryAfter(err); ra != nil {
		// The destination asked to wait: not a failure of the job.
		w.defers.holdOff(workCtx, f, job, ra)
		return
	}
	w.stats.Add(job.Tenant, func(s *TenantStats) { s.Failed++ })
	if IsPermanent(err) {
		// Retrying cannot help: dead-letter it now. Its failure count in
		// Redis is left as it is; it expires by itself.
		if f.settled.CompareAndSwap(false, true) {
			w.dlq.settle(workCtx, f.msg, job.ID, job.Tenant, "handler failed for good: "+err.Error(), 1)
		}
		return
	}
	fctx, cancel := context.WithTimeout(workCtx, w.cfg.RedisTimeout)
	n, _, cerr := w.failures.Failed(fctx, job.Tenant, job.ID, incarnation(job), int64(w.cfg.MaxFailures))
	cancel()
	if cerr != nil {
		// The count is unknown; retry later rather than dead-letter early.
		w.log.Warn("counting a handler failure failed", "tenant", job.Tenant, "job", job.ID, "err", cerr)
		n = 1
	}
	if n >= int64(w.cfg.MaxFailures) {
		w.log.Warn("job failed too often; dead-lettering it", "tenant", job.Tenant, "job", job.ID, "failures", n, "err", err)
		if !f.settled.CompareAndSwap(false, true) {
			return
		}
		w.dlq.settle(workCtx, f.msg, job.ID, job.Tenant, fmt.Sprintf("handler failed %d times: %v", n, err), n)
		return
	}
	delay := w.cfg.retryDelay(n)
	w.log.Info("handler failed; retrying", "tenant", job.Tenant, "job", job.ID, "failures", n, "retry_in", delay, "err", err)
	if cerr != nil {
		// The owner record may still name this incarnation, and a moved
		// copy would then be taken for a duplicate: NAK.
		f.settle(func(m jetstream.Msg) error { return m.NakWithDelay(delay) })
		return
	}
	// The retry is deferred like a throttled job, so a tenant whose jobs
	// keep failing cannot fill MaxAckPending with them: past its share of
	// NAK'd jobs (or for a long backoff) the retry leaves the consumer.
	if f.settled.CompareAndSwap(false, true) {
		ds := []Deferral{{Msg: f.msg, Job: job, Wait: delay, Reason: fmt.Sprintf(failedReasonPrefix+" %d of %d times", n, w.cfg.MaxFailures)}}
		w.defers.deferrer.Defer(workCtx, ds)
		w.defers.deferred(ds[0])
	}
}

// failedReasonPrefix starts the wait reason of a retry after a failure.
const failedReasonPrefix = "handler failed"

// observeStart records how long job waited for its handler, from its
// first publish by the server's clock to now by the worker's wall clock:
// clocks that disagree could make it negative, which counts as no wait.
// A job that was put off before (deferred, parked, held back: it was
// delivered before, or moved) has that wait recorded as its throttle wait
// too, to the end however many times it was put off: a job deferred
// past the horizon is deferred again, and only the whole wait says how
// long it waited. Retries after a handler failure are left out where the
// job says so (a moved retry's wait reason).
func (w *Worker) observeStart(job Job) {
	if job.Published.IsZero() {
		return // not read from a JetStream message
	}
	waited := max(0, time.Since(job.Published))
	w.obs.ObserveQueueWait(waited)
	if putOff(job) {
		w.obs.ObserveThrottleWait(waited)
	}
}

// putOff reports whether job comes back from a wait: delivered before,
// moved, or woken, and not a moved retry of a failed run.
func putOff(job Job) bool {
	if strings.HasPrefix(job.Header.Get(HeaderWaitReason), failedReasonPrefix) {
		return false
	}
	return job.Delivered > 1 || job.Deferrals > 0 || job.Header.Get(HeaderWoken) != ""
}

// callHandler runs h, turning a panic into an error of that job; the stack
// goes to the log, not into the error (it ends up in a header).
func (w *Worker) callHandler(ctx context.Context, job Job) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
			w.log.Error("handler panicked", "tenant", job.Tenant, "job", job.ID, "panic", r, "stack", string(debug.Stack()))
		}
	}()
	return w.handler(ctx, job)
}

// retryDelay is the backoff before the retry after the n-th failure.
func (c Config) retryDelay(n int64) time.Duration {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     c.RetryInitial,
		RandomizationFactor: 0.2,
		Multiplier:          2,
		MaxInterval:         c.RetryMax,
		Clock:               backoff.SystemClock,
	}
	b.Reset()
	d := b.NextBackOff()
	for i := int64(1); i < n; i++ {
		d = b.NextBackOff()
	}
	return d
}

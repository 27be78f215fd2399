package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/throttle"
)

// handlerRunner runs admitted jobs' handlers, at most Concurrency at once,
// and settles each job by its handler's outcome: acked, held off, retried
// (its failures counted) or dead-lettered. A handler's context carries
// what it may report back (SettleCost, below); the cost settler is
// called only for a job whose handler reported one.
type handlerRunner struct {
	handler  Handler
	failures FailureCounter
	slots    chan struct{} // one token per running handler
	handlers sync.WaitGroup
	hand     *inHand // the worker's: the flights handed back at the shutdown timeout
	// stoppedAt is when the pulling was told to stop, Unix ns; 0 until
	// then, or when it ended on an error.
	stoppedAt atomic.Int64
	defers    *deferSettler
	holds     *downstreamHolds // a job its downstream told to wait holds its tenant back (holds.go)
	costs     *costSettler     // the costs handlers reported, settled (settle.go)
	dlq       *deadLetter
	obs       Observer
	rec       *recorder
	cfg       Config
	log       *slog.Logger
}

// take admits a job the throttle admitted (throttle.Admitted): it is
// started after its group, its tenant taking turns with the others
// (tenantsInTurn). A job of a tenant in shadow mode that enforcing would
// have held back is counted.
func (r *handlerRunner) take(g *groupActs, it *item, res throttle.Result) bool {
	if res.ShadowWait > 0 || res.ShadowUnfunded {
		r.rec.add(it.job.Tenant, func(s *TenantStats) { s.ShadowLimited++; s.ShadowWait += res.ShadowWait })
	}
	g.admitted = append(g.admitted, it) // its leases noted when decided
	return true
}

// run calls the handler, keeps the job alive while it runs, and settles it.
// A job that succeeded has the cost it reported settled before it is
// acked: a worker that dies in between leaves it to be delivered again,
// and the settle is applied once per job however often it is asked for.
func (r *handlerRunner) run(workCtx context.Context, f *flight, job Job) {
	r.observeStart(job)
	began := time.Now()
	hctx, report := withCostReport(workCtx)
	err := r.callHandler(hctx, job)
	r.obs.ObserveHandler(time.Since(began))
	if err == nil {
		if cost, ok := report.reported(); ok {
			r.costs.settle(workCtx, job, f.started, cost)
		}
		if f.settle(func(m jetstream.Msg) error { return m.Ack() }) {
			r.rec.add(job.Tenant, func(s *TenantStats) { s.Completed++ })
		}
		return
	}
	r.failed(workCtx, f, job, err)
}

// failed settles job, whose handler returned err: handed back at
// shutdown, held off, dead-lettered or retried. Apart from run, so that
// run's frame, on the path of every job, stays small.
func (r *handlerRunner) failed(workCtx context.Context, f *flight, job Job, err error) {
	if workCtx.Err() != nil {
		// Shutdown cancelled the job: not its failure. Hand it back.
		f.settle(func(m jetstream.Msg) error { return m.Nak() })
		return
	}
	if ra := asRetryAfter(err); ra != nil {
		// The destination asked to wait: not a failure of the job.
		r.holds.holdOff(workCtx, f, job, ra)
		return
	}
	r.rec.add(job.Tenant, func(s *TenantStats) { s.Failed++ })
	if IsPermanent(err) {
		// Retrying cannot help: dead-letter it now. Its failure count in
		// Redis is left as it is; it expires by itself.
		if f.settled.CompareAndSwap(false, true) {
			r.dlq.settle(workCtx, f.msg, job.ID, job.Tenant, "handler failed for good: "+err.Error(), 1)
		}
		return
	}
	fctx, cancel := context.WithTimeout(workCtx, r.cfg.RedisTimeout)
	n, _, cerr := r.failures.Failed(fctx, job.Tenant, job.ID, incarnation(job), int64(r.cfg.MaxFailures))
	cancel()
	if cerr != nil {
		// The count is unknown; retry later rather than dead-letter early.
		r.log.Warn("counting a handler failure failed", "tenant", job.Tenant, "job", job.ID, "err", cerr)
		n = 1
	}
	if n >= int64(r.cfg.MaxFailures) {
		r.log.Warn("job failed too often; dead-lettering it", "tenant", job.Tenant, "job", job.ID, "failures", n, "err", err)
		if !f.settled.CompareAndSwap(false, true) {
			return
		}
		r.dlq.settle(workCtx, f.msg, job.ID, job.Tenant, fmt.Sprintf("handler failed %d times: %v", n, err), n)
		return
	}
	delay := r.cfg.retryDelay(n)
	r.log.Info("handler failed; retrying", "tenant", job.Tenant, "job", job.ID, "failures", n, "retry_in", delay, "err", err)
	// The retry is deferred like a throttled job, so a tenant whose jobs
	// keep failing cannot fill MaxAckPending with them: past its share of
	// NAK'd jobs (or for a long backoff) the retry leaves the consumer.
	// With the count unknown, the owner record may still name this
	// incarnation: NAK'd.
	r.defers.deferFlight(workCtx, f, Deferral{Job: job, Wait: delay,
		Reason: fmt.Sprintf(failedReasonPrefix+" %d of %d times", n, r.cfg.MaxFailures)}, cerr == nil)
}

// watchStop records in stoppedAt when ctx, the pulling's, is cancelled,
// until stop is called.
func (r *handlerRunner) watchStop(ctx context.Context) (stop func() bool) {
	return context.AfterFunc(ctx, func() { r.stoppedAt.Store(r.cfg.Now().UnixNano()) })
}

// finishHandlers waits for running handlers for what is left of
// ShutdownTimeout after stoppedAt (see watchStop), then cancels them and
// hands their jobs back.
func (r *handlerRunner) finishHandlers(cancelWork context.CancelFunc) {
	stopped := r.stoppedAt.Load()
	done := make(chan struct{})
	go func() { r.handlers.Wait(); close(done) }()
	left := r.cfg.ShutdownTimeout
	if stopped != 0 {
		left -= r.cfg.Now().Sub(time.Unix(0, stopped))
	}
	timer := time.NewTimer(max(left, 0))
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		r.log.Warn("shutdown timeout passed; cancelling running jobs and handing them back")
		cancelWork()
		r.hand.flights.Range(func(k, _ any) bool {
			k.(*flight).settle(func(m jetstream.Msg) error { return m.Nak() })
			return true
		})
		<-done
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
func (r *handlerRunner) observeStart(job Job) {
	if job.Published.IsZero() {
		return // not read from a JetStream message
	}
	waited := max(0, time.Since(job.Published))
	r.obs.ObserveQueueWait(waited)
	if putOff(job) {
		r.obs.ObserveThrottleWait(waited)
	}
}

// putOff reports whether job comes back from a wait: delivered before,
// moved, or woken, and not a moved retry of a failed run.
func putOff(job Job) bool {
	if strings.HasPrefix(job.Header.Get(header.WaitReason), failedReasonPrefix) {
		return false
	}
	return job.Delivered > 1 || job.Deferrals > 0 || job.Header.Get(header.Woken) != ""
}

// callHandler runs h, turning a panic into an error of that job; the stack
// goes to the log, not into the error (it ends up in a header).
func (r *handlerRunner) callHandler(ctx context.Context, job Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
			r.log.Error("handler panicked", "tenant", job.Tenant, "job", job.ID, "panic", p, "stack", string(debug.Stack()))
		}
	}()
	return r.handler(ctx, job)
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

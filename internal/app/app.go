// Package app assembles the worker from its settings and live connections:
// streams and consumers (streams.go), the deferral path (deferpath.go), the
// fast lane (lane.go), the limiter and the worker. Both `throttler` and
// `throttler demo` run it, so they share one wiring.
package app

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/config"
	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/internal/ops"
	"github.com/throttler/throttler/throttle"
)

// failureTTL is how long a job's handler-failure count is kept after its
// last failure.
const failureTTL = 24 * time.Hour

// Options are what Run needs besides the settings.
type Options struct {
	// NATS is a connection to the NATS server. Required.
	NATS *nats.Conn
	// Redis is the Redis client. Required.
	Redis throttle.Client
	// Handler runs admitted jobs. Defaults to the one THROTTLER_HANDLER
	// names (NewHandler).
	Handler consumer.Handler
	// Logger receives logs. Defaults to slog.Default().
	Logger *slog.Logger
	// OnWorker, when set, is called with the worker once it is built, so a
	// caller can read its Stats.
	OnWorker func(*consumer.Worker)
	// CensusEvery is how often the worker takes part in the fleet's count
	// of waiting jobs (throttler_waiting_jobs). Defaults to 10 s; tests
	// shorten it.
	CensusEvery time.Duration
}

// Run sets up the streams and the consumers, retrying with backoff while
// NATS is unreachable, then runs the worker until ctx is cancelled and the
// worker has shut down. A setting the server cannot serve ends it with an
// error matching ErrUnsupported.
func Run(ctx context.Context, cfg *Settings, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	js, err := jetstream.New(opts.NATS)
	if err != nil {
		return err
	}
	srv, err := startServer(ctx, cfg, opts, log)
	if err != nil {
		return err
	}
	defer srv.close()
	ready := srv.readiness()
	if ready == nil {
		ready = newReadiness(ctx, opts.NATS, opts.Redis, cfg.OnRedisError == config.OnRedisErrorAllow)
	}
	// Every worker answers the console's roll call, with an admin address
	// or not, so that any worker's console lists the whole fleet.
	agreement := newEnvAgreement(opts.NATS, cfg, newSelf(cfg), log)
	if err := srv.register(agreement.gauge()); err != nil {
		return err
	}
	defer answerRollCalls(opts.NATS, cfg, agreement, ready, log)()
	stopAdmin, err := startAdmin(cfg, opts, js, log)
	if err != nil {
		return err
	}
	defer stopAdmin()
	st, err := setUpWithRetry(ctx, opts.NATS, js, cfg, log)
	if err != nil || st == nil {
		return err // nil when stopped before set-up: nothing in flight
	}

	stats := consumer.NewStats(cfg.MetricsTenants)
	// After a tenant's limits change in the bucket, the worker brings back
	// the jobs it moved under the old ones (built below, once the limits
	// are in: until then it moved none), and at start those of recent
	// changes it did not see.
	var worker atomic.Pointer[consumer.Worker]
	var bringer *movedBringer
	if st.path.movesBack {
		fleet := cfg.Fleet(js)
		bringer = newMovedBringer(func(ctx context.Context, tenant string, to throttle.Policy, now time.Time) (int, error) {
			return ops.BringBackStale(ctx, fleet, tenant, to, now)
		}, func() (map[string]bool, bool) { return movedBy(worker.Load()) }, cfg.MaxDefer, log)
		go bringer.run(ctx)
	}
	policies, levels := livePolicies(ctx, opts.NATS, js, opts.Redis, cfg, st.stream.CachedInfo().Config.Replicas, stats, bringer, log)
	if policies == nil {
		return nil // stopped before the limits were in: nothing in flight
	}
	defer agreement.start(ctx, policies)()
	pauses, ok := livePauses(ctx, opts.NATS, js, cfg, st.stream.CachedInfo().Config.Replicas, log)
	if !ok {
		return nil // stopped before the pauses were in: nothing in flight
	}
	limiter, err := throttle.New(opts.Redis, throttle.Options{Policies: policies, Horizon: cfg.MaxDefer, Prefix: cfg.KeyPrefix, TimeZone: cfg.Location()})
	if err != nil {
		return err
	}
	engine, err := newEngine(limiter, cfg, failureTTL)
	if err != nil {
		return err
	}
	if err := engine.withLevels(limiter, levels); err != nil {
		return err
	}
	logLevels(cfg, levels, log)
	lctx, cancel := context.WithTimeout(ctx, cfg.RedisTimeout)
	if err := limiter.Load(lctx); err != nil {
		// Calls load the library themselves once Redis answers.
		log.Warn("loading the throttle's functions into Redis failed; they are loaded when Redis answers", "err", err)
	}
	cancel()

	ackPending := consumer.NewAckPending(st.jobs, 250*time.Millisecond)
	// The lane leaves to the jobs consumer the jobs of tenants under a
	// running cap (the worker's decision takes their leases) and of paused
	// tenants (the worker parks them, uncharged). Its decisions meet the
	// levels above the tenant as the worker's do, so a quiet tenant's job
	// still passes a flood's backlog in the stream.
	leaveToWorker := func(tenant string) bool {
		if pauses != nil {
			if _, _, paused := pauses.Paused(tenant, time.Now()); paused {
				return true
			}
		}
		p := policies.Policy(tenant)
		return cfg.MaxRunning > 0 || (p.Running > 0 && !p.Shadow)
	}
	lane, claims, err := st.lane(js, cfg, engine, leaveToWorker, stats, log)
	if err != nil {
		return err
	}
	handler := opts.Handler
	if handler == nil {
		var closeHandler func()
		if handler, closeHandler, err = NewHandler(js, cfg, log); err != nil {
			return err
		}
		defer closeHandler()
	}
	w, err := consumer.New(consumer.Params{
		JetStream:  js,
		Consumer:   st.jobs,
		Decider:    engine.decider,
		Failures:   engine.failures,
		Holder:     engine.holds,
		Settler:    engine.decider,
		Pauses:     pauses,
		Leases:     engine.caps,
		Levels:     engine.levelPoker(),
		Waker:      st.path.waker(js, cfg),
		Woken:      st.woken,
		Handler:    handler,
		Deferrer:   st.path.deferrer(js, cfg, ackPending),
		AckPending: ackPending,
		Bundles:    st.bundles,
		Lane:       lane,
		Claims:     claims,
		Stats:      stats,
		Recreate:   st.recreate,
		Observer:   srv.observer(),
		Config:     st.path.workerConfig(cfg, log),
	})
	if err != nil {
		return err
	}
	worker.Store(w)
	if opts.OnWorker != nil {
		opts.OnWorker(w)
	}
	var paused func(time.Time) []string
	if set, ok := pauses.(interface{ Active(time.Time) []string }); ok {
		paused = set.Active
	}
	waiting, err := newWaitingCounter(srv, limiter, w, ackPending, st.path.copies(js, cfg), st.path.copiesOf(js, cfg),
		paused, orDefault(opts.CensusEvery, censusEvery), log)
	if err != nil {
		return err
	}
	if err := srv.running(w, ackPending, st.jobs, waiting); err != nil {
		return err
	}
	ready.running(st.jobs)
	log.Info("worker running", "stream", cfg.Stream, "consumer", cfg.Consumer, "subjects", cfg.Subjects,
		"concurrency", cfg.Concurrency, "defer", st.path.mode, "fast_lane", lane != nil, "server", opts.NATS.ConnectedServerVersion())
	if waiting == nil {
		return w.Run(ctx)
	}
	wctx, stopWaiting := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		waiting.run(wctx)
	}()
	err = w.Run(ctx)
	stopWaiting()
	<-done
	return err
}

// setUpWithRetry sets up the streams and consumers, retrying with backoff
// while NATS is unreachable. It returns nil, nil when ctx is cancelled
// first.
func setUpWithRetry(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, cfg *Settings, log *slog.Logger) (*jobStreams, error) {
	var st *jobStreams
	setup := func() error {
		var err error
		st, err = setUp(ctx, nc, js, cfg, log)
		if errors.Is(err, ErrUnsupported) {
			return backoff.Permanent(err) // retrying cannot help
		}
		return err
	}
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 200 * time.Millisecond
	bo.MaxInterval = 10 * time.Second
	bo.MaxElapsedTime = 0
	notify := func(err error, d time.Duration) {
		if errors.Is(err, errNotConnected) {
			log.Debug("waiting for NATS to set up JetStream", "retry_in", d)
			return
		}
		log.Warn("setting up JetStream failed; retrying", "err", ExplainNoJetStream(nc, err), "retry_in", d)
	}
	if err := backoff.RetryNotify(setup, backoff.WithContext(bo, ctx), notify); err != nil {
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, err
	}
	return st, nil
}

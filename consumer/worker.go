// Package consumer is the worker's JetStream side: it pulls jobs from a
// durable consumer, reads each job's tenant and cost, asks the throttle
// engine about a whole pulled batch in one round trip, runs admitted jobs
// through a Handler, defers limited ones by exactly the engine's wait, and
// dead-letters jobs that are malformed or keep failing.
//
// An embedder needs New with its Params, a Handler and Run (the package
// example shows them); package streams creates the stream and the durable
// consumer it reads. Everything else it exports is something Params takes
// or a Handler gives, so that an embedder can assemble what the throttler
// binary does (internal/app assembles it from the environment):
//   - the worker: New, Params, Config (with a RedisErrorPolicy), Worker;
//   - a handler's side: Job, Handler, Forwarder, Permanent and IsPermanent,
//     RetryAfter, SettleCost (ErrNoCostReport);
//   - the collaborators Params takes, each an interface that a type of
//     another package satisfies: Decider, FailureCounter, Leaser, Holder,
//     Settler, Unreserver and LevelPoker (package throttle), Pauser
//     (pause), Waker (release), Lane and ClaimSettler (fastlane);
//   - deferral: a Deferrer puts off each Deferral; NakDeferrer (the
//     default), ScheduleDeferrer and FairDeferrer, which reads AckPending
//     (NewAckPending); ScheduleLead and NakedPerWorker are the binary's
//     settings of them (Example_moveWaitingJobs);
//   - what it counts: Stats (NewStats; OtherTenants), TenantStats and
//     LevelStats, and the timings an Observer receives.
//
// Stream setup, the bundle format and waking are packages of their own
// (streams, bundle, release); the fast lane's identity is fastlane's. A
// test checks that this list names every exported name.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Worker pulls jobs from one consumer and throttles them. Run it once.
type Worker struct {
	stats *Stats

	// The worker's components, each owning its state (one file each).
	pull      *puller          // pulls within the fetch credits; the pulled messages (fetch.go)
	hand      *inHand          // messages in hand, pulled or admitted, kept alive (keepalive.go)
	decider   *groupDecider    // the decide stage (decide.go)
	lifecycle *lifecycle       // a decided job's stages, in their order (lifecycle.go)
	caps      *capKeeper       // parking, leases and wakes of running caps (caps.go)
	levels    *levelKeeper     // parking, pokes and wakes under shared levels (levels.go)
	holds     *downstreamHolds // the holds downstreams asked for, and the Holder (holds.go)
	top       *topReporter     // what this worker knows of each tenant, for throttler top (topreply.go)
	defers    *deferSettler    // every deferral's outcome, and the moved jobs' bundles unpacked (deferloop.go)
	runs      *handlerRunner   // the handlers running, their slots, and their jobs settled (run.go)
	// background is the components beside the jobs' stages that this
	// worker's Params need, in the order Run starts them.
	background []background
}

// A background component runs beside the jobs' stages while Run runs:
// started with the pulling's context (ctx) and the settling's (work), it
// returns the stop that ends it and waits for it. New assembles the ones
// a worker's Params need; one not needed is absent, not started to do
// nothing.
type background func(ctx, work context.Context) (stop func())

// New returns a Worker, or an error naming what is missing.
func New(p Params) (*Worker, error) {
	var missing []error
	if p.JetStream == nil {
		missing = append(missing, errors.New("JetStream"))
	}
	if p.Consumer == nil {
		missing = append(missing, errors.New("Consumer"))
	}
	if p.Decider == nil {
		missing = append(missing, errors.New("Decider"))
	}
	if p.Failures == nil {
		missing = append(missing, errors.New("Failures"))
	}
	if p.Handler == nil {
		missing = append(missing, errors.New("Handler"))
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("consumer: missing %w", errors.Join(missing...))
	}
	if p.Leases == nil {
		// A Decider that applies caps gives the leases back itself.
		p.Leases, _ = p.Decider.(Leaser)
	}
	if p.Unreserver == nil {
		p.Unreserver, _ = p.Decider.(Unreserver)
	}
	if p.Waker == nil && p.Config.ParkFor == 0 {
		// No parked copy is woken: a job waiting for a lease comes back
		// often, to find its turn held while it lasts (the call TTL).
		p.Config.ParkFor = time.Second
	}
	cfg := p.Config.withDefaults()
	if p.Deferrer == nil {
		p.Deferrer = NakDeferrer{}
	}
	if p.Stats == nil {
		p.Stats = NewStats(cfg.StatsTenants)
	}
	if p.Observer == nil {
		p.Observer = nopObserver{}
	}
	if p.Settler == nil {
		p.Settler = ignoredCosts{}
	}
	pauses := newPauseGate(p.Pauses, p.Unreserver, cfg)
	w := &Worker{
		stats: p.Stats,
		hand:  &inHand{every: cfg.InProgressEvery, now: cfg.Now, log: cfg.Logger},
	}
	w.top = &topReporter{waiting: newWaiting(cfg.TopTenants), pauses: pauses, js: p.JetStream,
		subject: cfg.TopSubject, now: cfg.Now, log: cfg.Logger}
	rec := &recorder{stats: p.Stats, waiting: w.top.waiting, now: cfg.Now}
	w.runs = &handlerRunner{handler: p.Handler, failures: p.Failures, slots: make(chan struct{}, cfg.Concurrency), hand: w.hand,
		obs: p.Observer, rec: rec, cfg: cfg, log: cfg.Logger}
	w.pull = newPuller(p, cfg, &w.hand.pulled)
	short := newShortWait(cfg, &w.hand.pulled, rec, p.Observer)
	w.caps = &capKeeper{leases: p.Leases, waker: p.Waker, cfg: cfg, log: cfg.Logger, rec: rec,
		handlers: &w.runs.handlers, inflight: &w.hand.flights}
	w.levels = &levelKeeper{poker: p.Levels, waker: p.Waker, cfg: cfg, log: cfg.Logger, rec: rec, handlers: &w.runs.handlers}
	w.holds = &downstreamHolds{holder: p.Holder, js: p.JetStream, subject: cfg.HoldSubject,
		timeout: cfg.RedisTimeout, now: cfg.Now, maxHold: cfg.MaxHold, rec: rec, log: cfg.Logger}
	dlq := &deadLetter{js: p.JetStream, template: cfg.DLQSubject, handlers: &w.runs.handlers,
		rec: rec, cfg: cfg, log: cfg.Logger}
	unbundle := &unbundler{bundles: p.Bundles, js: p.JetStream, pull: w.pull, handlers: &w.runs.handlers,
		deadLetter: dlq.settle, cfg: cfg, log: cfg.Logger}
	w.defers = &deferSettler{deferrer: p.Deferrer, pull: w.pull, pauses: pauses, unbundle: unbundle,
		rec: rec, cfg: cfg, log: cfg.Logger}
	w.runs.defers, w.runs.dlq, w.runs.holds = w.defers, dlq, w.holds
	w.holds.deferFlight = w.defers.deferFlight
	pauses.rec, pauses.release, pauses.deferFlight = rec, w.holds.release, w.defers.deferFlight
	w.runs.costs = &costSettler{settler: p.Settler, rec: rec, timeout: cfg.RedisTimeout, log: cfg.Logger}
	redis := newRedisHealth(cfg.Logger, cfg.Now, cfg.OnRedisError, rec)
	w.decider = &groupDecider{throttle: p.Decider, redis: redis, short: short,
		pauses: pauses, pull: w.pull, lane: viewOf(p.Lane), obs: p.Observer, rec: rec, cfg: cfg, log: cfg.Logger}
	w.lifecycle = &lifecycle{pull: w.pull, hand: w.hand, redis: redis, pauses: pauses, holds: w.holds,
		caps: w.caps, levels: w.levels, dlq: dlq, runs: w.runs, rec: rec, cfg: cfg, log: cfg.Logger}
	fast := &laneAdapter{lane: p.Lane, claims: p.Claims, ackPending: p.AckPending, handlers: &w.runs.handlers,
		hand: w.hand, start: w.lifecycle.start, rec: rec, cfg: cfg, log: cfg.Logger}
	w.pull.preAdmitted = fast.startPreAdmitted
	w.lifecycle.stages = stagesInOrder(fast, duplicates{rec: rec, log: cfg.Logger}, w.caps, w.levels,
		unfunded{rec: rec, parkFor: cfg.ParkFor}, w.runs, dlq, short, w.defers, w.pull, redis)
	w.background = w.backgroundOf(p, cfg, unbundle, fast)
	return w, nil
}

// backgroundOf lists the background components p needs, in the order Run
// starts them: the keep-alive first, so that it stops last, keeping every
// job alive until the others are done.
func (w *Worker) backgroundOf(p Params, cfg Config, unbundle *unbundler, fast *laneAdapter) []background {
	bg := []background{w.hand.startKeepAlive}
	if p.Leases != nil {
		bg = append(bg, w.caps.startLeaseLoop)
	}
	if p.Levels != nil {
		bg = append(bg, w.levels.start)
	}
	if p.JetStream.Conn() != nil {
		if cfg.HoldSubject != "" {
			bg = append(bg, w.holds.listen)
		}
		if cfg.TopSubject != "" {
			bg = append(bg, w.top.listen)
		}
	}
	if p.Bundles != nil {
		bg = append(bg, unbundle.start)
	}
	if p.AckPending != nil {
		bg = append(bg, fast.startAckPending)
	}
	if p.Lane != nil {
		bg = append(bg, fast.startLane)
	}
	return bg
}

// Stats returns a snapshot of the per-tenant counters.
func (w *Worker) Stats() map[string]TenantStats { return w.stats.Snapshot() }

// Pulled is how many pulled messages the worker has not yet acted on (not
// yet decided, or decided and not yet started, settled or deferred).
func (w *Worker) Pulled() int { return w.hand.pulled.count() }

// HeldDownstream returns the tenants whose downstream asked the fleet to
// wait past now (a 429, or a 503 with Retry-After), as this worker heard.
func (w *Worker) HeldDownstream(now time.Time) []string { return w.holds.keys(now) }

// InHand is how many delivered messages the worker holds and has not yet
// acked or handed back: pulled and not yet acted on (Pulled), and admitted,
// waiting for a slot or running. The consumer's ack-pending count less the
// fleet's jobs in hand is the jobs NAK'd to come back later.
func (w *Worker) InHand() int { return w.hand.count() }

// Levels returns what each shared level (throttle.Level.String) did to
// this worker's jobs.
func (w *Worker) Levels() map[string]LevelStats { return w.levels.counts.snapshot() }

// QueuedUnder returns the shared levels (throttle.Level.String) this
// worker queued jobs under at or after from.
func (w *Worker) QueuedUnder(from time.Time) []string { return w.levels.parked.keys(from) }

// ParkedUnder returns the caps ("" for the fleet's, else a tenant) this
// worker parked jobs under at or after from.
func (w *Worker) ParkedUnder(from time.Time) []string { return w.caps.parked.keys(from) }

// Run pulls and throttles jobs until ctx is cancelled, then shuts down:
// it stops pulling, hands back (NAK) jobs not yet started, lets running jobs
// finish for up to ShutdownTimeout, then cancels them and hands them back
// too. It returns nil after a clean shutdown.
//
// A job passes through stages, each in a file of its own, joined by
// channels: fetch (fetch.go) → decide (decide.go: groups read one ahead on
// a goroutine of their own, decided on Run's) → a decided job's lifecycle
// (lifecycle.go, its stages in order), which starts handlers (run.go) and
// hands the jobs that must wait to the defer loop (deferloop.go). Beside
// them run the background components New assembled: the keep-alive
// (keepalive.go), and as the Params need them the renewal of leases, the
// pokes of levels, the listeners of holds and of top, the unbundler, the
// ack-pending monitor and the fast lane.
//
// Shutdown goes in this order, each step waiting for the one before:
//  1. ctx is cancelled: the fetchers, the unbundler and the fast lane stop
//     pulling. A pull under way runs to its short expiry instead of being
//     cut, since the messages the server already sent it would otherwise
//     wait out AckWait.
//  2. Deciding hands back every message still pulled; dispatch then hands
//     back admitted jobs still waiting for a handler slot, and the defer
//     loop settles the deferrals it was given, so nothing is left pending.
//  3. Running handlers get what is left of ShutdownTimeout, counted from
//     the cancellation; then their context is cancelled and their jobs are
//     handed back.
//  4. The background components stop, in the reverse of the order New
//     lists them: the lane, the listeners of top and of holds, the pokes
//     of levels, the renewal of leases, and the keep-alive last: until
//     every job is settled, it keeps JetStream from redelivering one the
//     worker still holds.
func (w *Worker) Run(ctx context.Context) error {
	// Two contexts: ctx stops the pulling; work, cancelled only after the
	// shutdown timeout, stops the handlers and the settling.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	defer w.runs.watchStop(ctx)()

	stops := make([]func(), len(w.background))
	for i, start := range w.background {
		stops[i] = start(ctx, work)
	}
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()
	msgs, fetchErr := w.pull.start(ctx, work)
	batches, deferDone := w.defers.startDeferring(work)
	decided, dispatchDone := w.lifecycle.startDispatching(ctx, work, batches)

	w.decider.decideLoop(ctx, msgs, decided)
	close(decided)
	<-dispatchDone
	close(batches)
	<-deferDone

	w.runs.finishHandlers(cancelWork)
	if err := fetchErr(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// sleep waits for d or until ctx is done; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// startLoop runs loop in a goroutine of its own until the returned stop is
// called; stop closes loop's done and returns once loop has returned.
func startLoop(loop func(done <-chan struct{})) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		loop(done)
	}()
	return func() {
		close(done)
		<-exited
	}
}

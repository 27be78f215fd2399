// Package consumer is the worker's JetStream side: it pulls jobs from a
// durable consumer, reads each job's tenant and cost, asks the throttle
// engine about a whole pulled batch in one round trip, runs admitted jobs
// through a Handler, defers limited ones by exactly the engine's wait, and
// dead-letters jobs that are malformed or keep failing.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/subject"
	"github.com/throttler/throttler/tenant"
	"github.com/throttler/throttler/throttle"
)

// Decider decides a batch of jobs, each an incarnation of its job (see
// throttle.Copies); *throttle.Copies satisfies it.
type Decider interface {
	DecideBatch(ctx context.Context, copies []throttle.Copy) []throttle.Result
}

// FailureCounter counts handler failures per job across the fleet;
// *throttle.Copies satisfies it.
type FailureCounter interface {
	// Failed records one more failure of a job and returns the count;
	// below giveUpAt it also gives up the job's owner record if that names
	// incarnation (see throttle.Copies.Failed), so the retry may be moved.
	Failed(ctx context.Context, tenant, jobID string, incarnation, giveUpAt int64) (n int64, released bool, err error)
}

// RedisErrorPolicy says what to do with a job whose decision failed because
// Redis is unreachable or timing out.
type RedisErrorPolicy int

const (
	// DeferOnRedisError defers the job with backoff: never over-admits.
	DeferOnRedisError RedisErrorPolicy = iota
	// AllowOnRedisError admits the job, logged and counted.
	AllowOnRedisError
)

// Config tunes a Worker. The zero value of each field takes its default.
type Config struct {
	// Tenant says where a job's tenant comes from. Defaults to subject token 2.
	Tenant tenant.Source
	// CostHeader names the header carrying a job's cost. Defaults to "Job-Cost".
	CostHeader string
	// Concurrency caps the jobs whose handler runs at once. Defaults to 16.
	Concurrency int
	// FetchBatch caps the messages pulled, and decided, at once; at most
	// twice as many are pulled and not yet decided. Defaults to 64.
	FetchBatch int
	// MaxFailures is the number of handler failures after which a job goes
	// to the dead-letter subject. Defaults to 5.
	MaxFailures int
	// RetryInitial and RetryMax pace retries after a handler failure: the
	// delay before retry n is RetryInitial × 2^(n-1), capped at RetryMax,
	// ±20%. Default to 1s and 5m.
	RetryInitial, RetryMax time.Duration
	// OnRedisError says what to do when a decision fails because of Redis.
	// Defaults to DeferOnRedisError.
	OnRedisError RedisErrorPolicy
	// RedisTimeout bounds one batch decision. Defaults to 2s.
	RedisTimeout time.Duration
	// ShutdownTimeout is how long in-flight jobs may run after Run's context
	// is cancelled before their contexts are cancelled too. Defaults to 30s.
	ShutdownTimeout time.Duration
	// InProgressEvery is how often a running job tells JetStream it is alive
	// (InProgress), so a long handler outlives AckWait. Defaults to 10s.
	InProgressEvery time.Duration
	// DLQSubject is the dead-letter subject template. Defaults to "dlq.{tenant}".
	DLQSubject subject.Template
	// TermWithReason sends the dead-letter reason with Term; servers before
	// 2.10 do not know it. Defaults to false (plain Term).
	TermWithReason bool
	// StatsTenants caps the tenants Stats (and /metrics) count one by one;
	// the counts of tenants first seen after that many go to OtherTenants,
	// so memory stays bounded however many tenants come and go. Defaults
	// to 10,000.
	StatsTenants int
	// Logger receives the worker's logs. Defaults to slog.Default().
	Logger *slog.Logger
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Tenant == (tenant.Source{}) {
		c.Tenant = tenant.FromSubject(2)
	}
	setDefault(&c.CostHeader, "Job-Cost")
	setDefault(&c.Concurrency, 16)
	setDefault(&c.FetchBatch, 64)
	setDefault(&c.MaxFailures, 5)
	setDefault(&c.RetryInitial, time.Second)
	setDefault(&c.RetryMax, 5*time.Minute)
	setDefault(&c.RedisTimeout, 2*time.Second)
	setDefault(&c.ShutdownTimeout, 30*time.Second)
	setDefault(&c.InProgressEvery, 10*time.Second)
	setDefault(&c.DLQSubject, "dlq.{tenant}")
	setDefault(&c.StatsTenants, 10_000)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Params is everything a Worker needs.
type Params struct {
	// JetStream publishes dead letters. Required.
	JetStream jetstream.JetStream
	// Consumer is the durable pull consumer to read. Required.
	Consumer jetstream.Consumer
	// Decider is the throttle engine. Required.
	Decider Decider
	// Failures counts handler failures. Required.
	Failures FailureCounter
	// Handler runs admitted jobs. Required.
	Handler Handler
	// Deferrer puts off limited jobs. Defaults to NakDeferrer.
	Deferrer Deferrer
	// Bundles, when set, is the consumer of fired bundles of moved jobs
	// (see ScheduleDeferrer.Bundle); Run unpacks them while it runs.
	Bundles jetstream.Consumer
	// FastLane, when set, lets the jobs of tenants with nothing queued pass
	// a backlog of other tenants' jobs; see FastLane.
	FastLane *FastLane
	// Recreate, when set, sets up the stream and the consumers again. Run
	// calls it when a pull finds its consumer deleted (or no one answers
	// for it), so a worker outlives an operator's mistake.
	Recreate func(context.Context) error
	// Config tunes the worker.
	Config Config
}

// Worker pulls jobs from one consumer and throttles them. Run it once.
type Worker struct {
	js       jetstream.JetStream
	cons     jetstream.Consumer
	bundles  jetstream.Consumer
	lane     *lane // nil without a fast lane
	recreate func(context.Context) error
	decider  Decider
	failures FailureCounter
	handler  Handler
	deferrer Deferrer
	dlq      deadLetter
	cfg      Config
	log      *slog.Logger
	stats    *stats

	slots    chan struct{} // one token per running handler
	credits  chan struct{} // one token per message pulled and not yet dispatched
	handlers sync.WaitGroup
	inflight sync.Map // *flight → struct{}, admitted jobs, running or waiting for a slot
	held     heldMsgs // messages pulled and not yet acted on

	redisBackoff *backoff.ExponentialBackOff // used by Run's deciding loop only
	recreating   sync.Mutex                  // one recreate at a time (see recreateIfGone)
	redisDown    time.Time                   // when Redis began failing, zero while it answers; deciding loop only
}

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
	cfg := p.Config.withDefaults()
	if p.Deferrer == nil {
		p.Deferrer = NakDeferrer{}
	}
	rb := backoff.NewExponentialBackOff()
	rb.InitialInterval = 100 * time.Millisecond
	rb.MaxInterval = 30 * time.Second
	rb.MaxElapsedTime = 0
	w := &Worker{
		js:           p.JetStream,
		cons:         p.Consumer,
		bundles:      p.Bundles,
		recreate:     p.Recreate,
		decider:      p.Decider,
		failures:     p.Failures,
		handler:      p.Handler,
		deferrer:     p.Deferrer,
		dlq:          deadLetter{js: p.JetStream, template: cfg.DLQSubject},
		cfg:          cfg,
		log:          cfg.Logger,
		stats:        newStats(cfg.StatsTenants),
		slots:        make(chan struct{}, cfg.Concurrency),
		credits:      make(chan struct{}, 2*cfg.FetchBatch),
		redisBackoff: rb,
	}
	if p.FastLane != nil {
		l, err := newLane(*p.FastLane, w)
		if err != nil {
			return nil, err
		}
		w.lane = l
	}
	return w, nil
}

// Stats returns a snapshot of the per-tenant counters.
func (w *Worker) Stats() map[string]TenantStats { return w.stats.snapshot() }

// Held is how many pulled messages the worker has not yet acted on (not yet
// decided, or decided and not yet started, settled or deferred).
func (w *Worker) Held() int { return w.held.count() }

// Run pulls and throttles jobs until ctx is cancelled, then shuts down:
// it stops pulling, hands back (NAK) jobs not yet started, lets running jobs
// finish for up to ShutdownTimeout, then cancels them and hands them back
// too. It returns nil after a clean shutdown.
func (w *Worker) Run(ctx context.Context) error {
	// Two contexts: ctx stops the pulling; workCtx, cancelled only after the
	// shutdown timeout, stops the handlers.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()

	keepAliveDone := make(chan struct{})
	defer close(keepAliveDone)
	go w.keepAliveLoop(keepAliveDone)

	// The shutdown timeout runs from the moment ctx is cancelled, whatever
	// is still being pulled or decided then.
	stopping := make(chan time.Time, 1)
	go func() {
		select {
		case <-ctx.Done():
			stopping <- time.Now()
		case <-keepAliveDone:
		}
	}()

	if w.bundles != nil {
		w.handlers.Add(1)
		go func() {
			defer w.handlers.Done()
			w.unbundleLoop(ctx)
		}()
	}

	msgs := make(chan jetstream.Msg, w.cfg.FetchBatch)
	fetchDone := make(chan error, 1)
	var pulls sync.WaitGroup
	pulls.Add(1)
	go func() { defer pulls.Done(); fetchDone <- w.fetchLoop(ctx, w.cons, w.cfg.FetchBatch, msgs, nil) }()
	if w.lane != nil {
		stop, err := w.startLane(ctx)
		if err != nil {
			w.log.Warn("fast lane off: subscribing to arrivals failed", "subject", w.lane.Arrivals, "err", err)
		} else {
			defer stop()
			// Fast copies are few: small pulls, from the same credits. Those
			// the lane admitted start at once, without waiting for a group.
			direct := func(m jetstream.Msg) bool { return w.startFastCopy(ctx, workCtx, m) }
			pulls.Add(1)
			go func() {
				defer pulls.Done()
				_ = w.fetchLoop(ctx, w.lane.Consumer, min(8, w.cfg.FetchBatch), msgs, direct)
			}()
		}
	}
	go func() { pulls.Wait(); close(msgs) }()

	// Deferring runs in a goroutine of its own, one batch after the other,
	// so moving one group's jobs overlaps with deciding the next while the
	// copies are still stored in slot order.
	batches := make(chan deferBatch, 4)
	moverDone := make(chan struct{})
	go func() { defer close(moverDone); w.deferLoop(workCtx, batches) }()

	// Acting on a group's decisions (starting handlers, collecting the
	// deferrals) runs in a goroutine of its own, so the next group is
	// decided meanwhile; groups are acted on in the order they were decided.
	decided := make(chan decidedGroup, 1)
	actDone := make(chan struct{})
	go func() {
		defer close(actDone)
		for g := range decided {
			batches <- deferBatch{deferrals: w.act(ctx, workCtx, g), credits: g.credits}
		}
	}()

	for msg := range msgs {
		group := w.drain(msg, msgs)
		if ctx.Err() != nil {
			w.handBack(group)
			w.releaseCredits(len(group))
			continue
		}
		g := w.decide(ctx, group)
		decided <- g
		if w.lane != nil {
			deferred, decided := g.deferred()
			if d := w.lane.pause(time.Now(), deferred, decided); d > 0 {
				sleep(ctx, d)
			}
		}
		if g.redisWait > 0 {
			// Give Redis time to come back instead of pulling more jobs only
			// to defer them again.
			sleep(ctx, g.redisWait)
		}
	}
	close(decided)
	<-actDone
	close(batches)
	<-moverDone
	fetchErr := <-fetchDone

	// Shutdown: running handlers get what is left of ShutdownTimeout.
	done := make(chan struct{})
	go func() { w.handlers.Wait(); close(done) }()
	left := w.cfg.ShutdownTimeout
	select {
	case at := <-stopping:
		left -= time.Since(at)
	default: // the pulling ended on an error, not a stop
	}
	timer := time.NewTimer(max(left, 0))
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		w.log.Warn("shutdown timeout passed; cancelling running jobs and handing them back")
		cancelWork()
		w.inflight.Range(func(k, _ any) bool {
			k.(*flight).settle(func(m jetstream.Msg) error { return m.Nak() })
			return true
		})
		<-done
	}
	if fetchErr != nil && !errors.Is(fetchErr, context.Canceled) {
		return fetchErr
	}
	return nil
}

// fetchLoop pulls messages from cons, up to batch at a time, and sends
// them to msgs until ctx is cancelled; direct, when set, may take a message
// instead (it reports whether it did). It holds one credit per message
// pulled and not yet dispatched, at most 2×FetchBatch for all its loops, so
// the worker never has more than that many messages delivered and
// undecided: they count against the consumer's MaxAckPending.
func (w *Worker) fetchLoop(ctx context.Context, cons jetstream.Consumer, batch int, msgs chan<- jetstream.Msg, direct func(jetstream.Msg) bool) error {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 100 * time.Millisecond
	bo.MaxInterval = 5 * time.Second
	bo.MaxElapsedTime = 0
	for {
		// Wait for one credit, then take as many more as are free.
		select {
		case w.credits <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		n := 1
		for n < batch && w.takeCredit() {
			n++
		}
		got, err := w.fetch(ctx, cons, n, msgs, direct)
		w.releaseCredits(n - got)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			wait := bo.NextBackOff()
			w.log.Warn("pull failed; retrying", "err", err, "retry_in", wait)
			w.recreateIfGone(ctx, err)
			if !sleep(ctx, wait) {
				return ctx.Err()
			}
			continue
		}
		bo.Reset()
	}
}

// recreateIfGone sets up the stream and consumers again when err, from a
// pull, says the consumer is gone: deleted, or no one answers for it. The
// worker's pulling loops all see it at once; they set things up one after
// the other, since a stream update at the same time as a consumer's
// creation races inside nats-server 2.15.2 (fileStore.UpdateConfig
// against fileStore.ConsumerStore, caught by the race detector).
func (w *Worker) recreateIfGone(ctx context.Context, err error) {
	if w.recreate == nil || !(errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, nats.ErrNoResponders)) {
		return
	}
	w.recreating.Lock()
	defer w.recreating.Unlock()
	if rerr := w.recreate(ctx); rerr != nil {
		w.log.Warn("setting up the consumer again failed; retrying", "err", rerr)
		return
	}
	w.log.Warn("the consumer was gone; set it up again", "err", err)
}

// unbundleLoop pulls fired bundles from the bundles consumer (filtering
// <prefix>.u.*.*, which no single copy's subject matches) and unpacks them
// with Unbundle until ctx is cancelled. A bundle that cannot be unpacked
// now is handed back and tried again after RetryInitial; one that never
// can be (ErrBadBundle) is dead-lettered.
func (w *Worker) unbundleLoop(ctx context.Context) {
	for ctx.Err() == nil {
		fctx, cancel := context.WithTimeout(ctx, time.Second)
		batch, err := w.bundles.Fetch(16, jetstream.FetchContext(fctx))
		if err == nil {
			for m := range batch.Messages() {
				w.unbundleOne(ctx, m)
			}
			err = batch.Error()
		}
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && !errors.Is(err, jetstream.ErrNoMessages) && ctx.Err() == nil {
			w.log.Warn("pulling bundles failed; retrying", "err", err)
			w.recreateIfGone(ctx, err)
			sleep(ctx, w.cfg.RetryInitial)
		}
	}
}

// unbundleOne unpacks one fired bundle, or hands it back, or dead-letters
// it.
func (w *Worker) unbundleOne(ctx context.Context, m jetstream.Msg) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := Unbundle(uctx, w.js, m)
	switch {
	case err == nil:
	case errors.Is(err, ErrBadBundle):
		w.deadLetterBundle(uctx, m, err)
	case errors.Is(err, errBundleLeft):
		w.log.Warn("could not delete an unpacked bundle; it stays in the stream, acked", "subject", m.Subject(), "err", err)
	default:
		w.log.Warn("unpacking a bundle of moved jobs failed; retrying", "subject", m.Subject(), "err", err)
		if nerr := m.NakWithDelay(w.cfg.RetryInitial); nerr != nil {
			w.log.Warn("hand back failed; JetStream redelivers after AckWait", "err", nerr)
		}
	}
}

// takeCredit takes a fetch credit if one is free.
func (w *Worker) takeCredit() bool {
	select {
	case w.credits <- struct{}{}:
		return true
	default:
		return false
	}
}

// releaseCredits gives back n fetch credits.
func (w *Worker) releaseCredits(n int) {
	for i := 0; i < n; i++ {
		<-w.credits
	}
}

// maxPullExpiry bounds one pull request. Shutdown waits for the pull under
// way to end, so keep it short: a quarter of the shutdown timeout at most.
const maxPullExpiry = time.Second

// fetch pulls up to n messages from cons into msgs (or to direct, which
// may take them) and returns how many it pulled. The pull is not cancelled
// by shutdown: cancelling it would drop the messages the server has
// already sent to it, which would then wait out AckWait. Instead it runs
// to its short expiry and every message it brings reaches Run, which
// hands it back.
func (w *Worker) fetch(ctx context.Context, cons jetstream.Consumer, n int, msgs chan<- jetstream.Msg, direct func(jetstream.Msg) bool) (int, error) {
	expiry := min(maxPullExpiry, max(50*time.Millisecond, w.cfg.ShutdownTimeout/4))
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), expiry)
	defer cancel()
	batch, err := cons.Fetch(n, jetstream.FetchContext(fctx))
	if err != nil {
		return 0, fmt.Errorf("fetch: %w", err)
	}
	got := 0
	for msg := range batch.Messages() {
		if direct != nil && direct(msg) {
			got++
			w.releaseCredits(1)
			continue
		}
		w.held.add(msg) // kept alive until acted on
		msgs <- msg     // the dispatcher hands back what it will not start
		got++
	}
	if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && !errors.Is(err, jetstream.ErrNoMessages) {
		return got, fmt.Errorf("fetch: %w", err)
	}
	return got, nil
}

// drain returns first together with every message already waiting in msgs,
// up to FetchBatch, so that they are decided in one round trip.
func (w *Worker) drain(first jetstream.Msg, msgs <-chan jetstream.Msg) []jetstream.Msg {
	group := []jetstream.Msg{first}
	for len(group) < w.cfg.FetchBatch {
		select {
		case m, ok := <-msgs:
			if !ok {
				return group
			}
			group = append(group, m)
		default:
			return group
		}
	}
	return group
}

// handBack returns messages that will not be started to JetStream for
// immediate redelivery.
func (w *Worker) handBack(group []jetstream.Msg) {
	for _, m := range group {
		w.held.remove(m)
		if err := m.Nak(); err != nil {
			w.log.Warn("hand back failed; JetStream redelivers after AckWait", "err", err)
		}
	}
}

// item is one message of a dispatched group.
type item struct {
	msg  jetstream.Msg
	job  Job
	bad  *badJobError
	slot int64 // the slot a moved copy was scheduled for, µs; 0 otherwise
}

// readGroup reads the jobs of a group. Copies of moved jobs that fired
// together are put back in slot order, so a tenant's jobs keep their
// reservation order.
func (w *Worker) readGroup(group []jetstream.Msg) []item {
	items := make([]item, 0, len(group))
	var last jetstream.Msg // the jobs consumer's furthest delivery
	var lastSeq uint64
	for _, m := range group {
		job, err := readJob(m, w.cfg.Tenant, w.cfg.CostHeader)
		if w.lane != nil && job.Sequence > lastSeq && m.Headers().Get(HeaderFast) == "" {
			last, lastSeq = m, job.Sequence
		}
		w.stats.add(job.Tenant, func(s *TenantStats) { s.Delivered++ })
		var bad *badJobError
		switch {
		case errors.As(err, &bad):
			items = append(items, item{msg: m, job: job, bad: bad})
		case err != nil:
			// Not a JetStream message we can read: hand it back.
			w.log.Error("unreadable message; handing it back", "subject", m.Subject(), "err", err)
			w.handBack([]jetstream.Msg{m})
		default:
			slot, _ := strconv.ParseInt(m.Headers().Get(HeaderSlot), 10, 64)
			items = append(items, item{msg: m, job: job, slot: slot})
		}
	}
	if w.lane != nil && last != nil {
		if meta, err := last.Metadata(); err == nil {
			w.lane.observe(lastSeq, meta.NumPending)
		}
	}
	sort.SliceStable(items, func(i, j int) bool { return items[i].slot < items[j].slot })
	return items
}

// deferBatch is one group's deferrals, handed to the defer loop, and the
// fetch credits the group holds until they are settled.
type deferBatch struct {
	deferrals []Deferral
	credits   int
}

// deferLoop settles each batch's deferrals with the Deferrer, in order, then
// frees the batch's credits.
func (w *Worker) deferLoop(ctx context.Context, batches <-chan deferBatch) {
	for b := range batches {
		// Take every batch already waiting too: one Defer call for all of
		// them keeps more copies in flight per round trip.
		credits, ds := b.credits, b.deferrals
	more:
		for {
			select {
			case nb, ok := <-batches:
				if !ok {
					break more
				}
				credits += nb.credits
				ds = append(ds, nb.deferrals...)
			default:
				break more
			}
		}
		if len(ds) > 0 {
			w.deferrer.Defer(ctx, ds)
		}
		for _, d := range ds {
			if d.Moved {
				w.stats.add(d.Job.Tenant, func(s *TenantStats) { s.Moved++ })
			}
			if d.Err != nil {
				w.log.Warn("deferring a job", "tenant", d.Job.Tenant, "job", d.Job.ID, "err", d.Err)
			}
		}
		w.releaseCredits(credits)
	}
}

// decidedGroup is a group of jobs with their decisions.
type decidedGroup struct {
	items   []item
	idx     []int             // idx[k] is the item results[k] decides
	results []throttle.Result // one per item that is not bad
	credits int               // fetch credits the group holds
	// redisWait, when Redis failed under DeferOnRedisError, is how long
	// the jobs it failed for are put off, and the pulling with them.
	redisWait time.Duration
}

// deferred counts the group's jobs that were decided and must wait, and
// those decided.
func (g decidedGroup) deferred() (deferred, decided int) {
	for _, res := range g.results {
		if res.Err == nil {
			decided++
			if res.Outcome == throttle.Reserved || res.Outcome == throttle.Limited {
				deferred++
			}
		}
	}
	return deferred, decided
}

// decide reads a group's jobs and decides them in one round trip.
func (w *Worker) decide(ctx context.Context, group []jetstream.Msg) decidedGroup {
	g := decidedGroup{items: w.readGroup(group), credits: len(group)}
	reqs := make([]throttle.Copy, 0, len(g.items))
	g.idx = make([]int, 0, len(g.items))
	for i, it := range g.items {
		if it.bad != nil {
			continue
		}
		// A message on its first delivery that is not a moved copy was never
		// decided, so it holds no reservation for the script to read.
		fresh := it.job.Delivered == 1 && it.job.Header.Get(HeaderJobID) == ""
		// A fresh original never records itself as owner, and owners are
		// stream sequences (never 0): 0 serves it and keeps the script's
		// cheap path for the usual value.
		var inc int64
		if !fresh {
			inc = incarnation(it.job)
		}
		reqs = append(reqs, throttle.Copy{Request: throttle.Request{Tenant: it.job.Tenant, JobID: it.job.ID, Cost: it.job.Cost},
			Incarnation: inc, Fresh: fresh})
		g.idx = append(g.idx, i)
	}
	if len(reqs) == 0 {
		return g
	}
	dctx, cancel := context.WithTimeout(ctx, w.cfg.RedisTimeout)
	g.results = w.decider.DecideBatch(dctx, reqs)
	cancel()
	redisFailed := false
	for _, res := range g.results {
		if res.Err != nil && !errors.Is(res.Err, throttle.ErrInvalid) && ctx.Err() == nil {
			redisFailed = true
			break
		}
	}
	switch {
	case !redisFailed:
		w.redisBackoff.Reset()
		if !w.redisDown.IsZero() {
			w.log.Info("redis answers again", "down_for", time.Since(w.redisDown).Round(time.Millisecond))
			w.redisDown = time.Time{}
		}
	case w.cfg.OnRedisError == DeferOnRedisError:
		g.redisWait = w.redisBackoff.NextBackOff()
	}
	if redisFailed && w.redisDown.IsZero() {
		w.redisDown = time.Now()
	}
	return g
}

// incarnation tells the messages carrying one job apart for the throttle's
// owner record (throttle.Copy.Incarnation): the stream sequence of the
// message as delivered, unique to the original and to every copy, even two
// copies of one move. A stream never reaches 2^53 messages; the modulo only
// keeps the value in the throttle's range.
//
// A fast copy (see FastLane) is the exception: its incarnation is fixed by
// the original's sequence, so the lane can claim the job for it before it
// is stored.
func incarnation(job Job) int64 {
	if job.Header.Get(HeaderFast) != "" {
		return fastIncarnation(job.OriginalSequence())
	}
	return int64(job.Sequence % (1 << 53))
}

// act acts on each decision of a group: start, ack a duplicate, or
// dead-letter. It returns the limited jobs, in slot order, for the defer
// loop.
func (w *Worker) act(ctx, workCtx context.Context, g decidedGroup) []Deferral {
	items := g.items
	for _, it := range items {
		w.held.remove(it.msg) // settled below, or a flight
	}
	var deferrals []Deferral
	// Admitted jobs are started after the loop, taking the tenants in turn.
	var admitted []*item
	var (
		redisFailed int   // jobs Redis failed to decide
		redisErr    error // the first such failure
	)
	for k, i := range g.idx {
		it := &items[i]
		res := g.results[k]
		w.stats.add(it.job.Tenant, func(s *TenantStats) { s.RedisCalls++ })
		switch {
		case res.Err == nil && res.Outcome == throttle.Duplicate && isFastClaim(res.Owner):
			// The fast lane claimed this job for its copy: acked once the
			// copy is stored, handed back until then.
			w.handlers.Add(1)
			go func(msg jetstream.Msg, job Job) {
				defer w.handlers.Done()
				w.settleFastClaimed(workCtx, msg, job)
			}(it.msg, it.job)
		case res.Err == nil && res.Outcome == throttle.Duplicate:
			// Another incarnation of this moved job already ran.
			w.log.Warn("duplicate of a moved job; acking it without running", "tenant", it.job.Tenant, "job", it.job.ID,
				"incarnation", incarnation(it.job), "moves", it.job.Deferrals, "owner", res.Owner)
			w.stats.add(it.job.Tenant, func(s *TenantStats) { s.Duplicates++ })
			w.settle(it.msg, func(m jetstream.Msg) error { return m.Ack() })
		case res.Err == nil && res.Outcome == throttle.Admitted:
			admitted = append(admitted, it)
		case res.Err == nil:
			w.stats.add(it.job.Tenant, func(s *TenantStats) { s.Deferred++ })
			deferrals = append(deferrals, Deferral{Msg: it.msg, Job: it.job, Wait: res.Wait})
		case errors.Is(res.Err, throttle.ErrInvalid):
			it.bad = &badJobError{tenant: it.job.Tenant, reason: res.Err.Error()}
		case ctx.Err() != nil:
			// The worker is stopping and cut the decision short.
			w.handBack([]jetstream.Msg{it.msg})
		default:
			w.stats.add(it.job.Tenant, func(s *TenantStats) { s.RedisErrors++ })
			if redisErr == nil {
				redisErr = res.Err
			}
			redisFailed++
			if w.cfg.OnRedisError == AllowOnRedisError {
				w.log.Debug("redis failed; admitting job by policy", "tenant", it.job.Tenant, "job", it.job.ID, "err", res.Err)
				w.stats.add(it.job.Tenant, func(s *TenantStats) { s.AllowedOnRedisError++ })
				admitted = append(admitted, it)
				continue
			}
			// Redis failed while ctx was live, so decide set redisWait.
			wait := g.redisWait
			w.log.Debug("redis failed; deferring job", "tenant", it.job.Tenant, "job", it.job.ID, "retry_in", wait, "err", res.Err)
			w.settle(it.msg, func(m jetstream.Msg) error { return m.NakWithDelay(wait) })
		}
	}
	// One line per group, not per job: an outage would flood the log.
	switch {
	case redisFailed == 0:
	case w.cfg.OnRedisError == AllowOnRedisError:
		w.log.Warn("redis failed; admitting jobs by policy", "jobs", redisFailed, "err", redisErr)
	default:
		w.log.Warn("redis failed; deferring jobs", "jobs", redisFailed, "retry_in", g.redisWait, "err", redisErr)
	}
	for _, it := range items {
		if it.bad != nil {
			w.deadLetterAsync(workCtx, it.msg, it.job.ID, it.bad.tenant, it.bad.reason, 0)
		}
	}
	// Every admitted job is a flight, kept alive, from now: the later ones
	// may wait long for a slot while long jobs run.
	order := tenantsInTurn(admitted)
	flights := make([]*flight, len(order))
	now := time.Now()
	for i, it := range order {
		flights[i] = &flight{msg: it.msg, started: now, log: w.log}
		w.inflight.Store(flights[i], struct{}{})
	}
	for i, it := range order {
		w.start(ctx, workCtx, flights[i], it.job)
	}
	return deferrals
}

// tenantsInTurn orders a group's admitted jobs so that the tenants take
// turns: the first job of each tenant, then the second job of each tenant
// that has two, and so on, each round in the group's order. Each tenant's
// jobs keep their order. When every handler slot is busy, a tenant with one
// job in a group otherwise filled by a flooding tenant waits for one slot,
// not for the flood's whole share of the group.
func tenantsInTurn(jobs []*item) []*item {
	if len(jobs) < 2 {
		return jobs
	}
	rank := make(map[string]int) // a job's rank among its tenant's jobs
	ranks := make([]int, len(jobs))
	for i, it := range jobs {
		ranks[i] = rank[it.job.Tenant]
		rank[it.job.Tenant]++
	}
	if len(rank) == 1 {
		return jobs
	}
	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return ranks[order[a]] < ranks[order[b]] })
	out := make([]*item, len(jobs))
	for k, i := range order {
		out[k] = jobs[i]
	}
	return out
}

// settle settles msg with f. A failure is logged: the message stays pending
// and JetStream redelivers it after AckWait.
func (w *Worker) settle(msg jetstream.Msg, f func(jetstream.Msg) error) {
	if err := f(msg); err != nil {
		w.log.Warn("settling a message failed; JetStream redelivers it after AckWait", "subject", msg.Subject(), "err", err)
	}
}

// flight is one job whose handler is running. Exactly one settlement wins:
// the handler's outcome, or the shutdown's hand-back.
type flight struct {
	msg     jetstream.Msg
	started time.Time
	settled atomic.Bool
	log     *slog.Logger
}

// settle applies f once; it reports whether this call did.
func (f *flight) settle(fn func(jetstream.Msg) error) bool {
	if !f.settled.CompareAndSwap(false, true) {
		return false
	}
	if err := fn(f.msg); err != nil {
		f.log.Warn("settling a message failed; JetStream redelivers it after AckWait", "subject", f.msg.Subject(), "err", err)
	}
	return true
}

// start runs the handler of an admitted job, its flight f already in
// inflight, in its own goroutine once one of the Concurrency slots is free,
// holding the slot until the job is settled. If the worker stops first, the
// job is handed back.
func (w *Worker) start(ctx, workCtx context.Context, f *flight, job Job) {
	select {
	case w.slots <- struct{}{}:
	case <-ctx.Done():
		w.inflight.Delete(f)
		f.settle(func(m jetstream.Msg) error { return m.Nak() })
		return
	}
	w.stats.add(job.Tenant, func(s *TenantStats) { s.Admitted++ })
	w.handlers.Add(1)
	go func() {
		defer w.handlers.Done()
		defer func() { <-w.slots }()
		defer w.inflight.Delete(f)
		w.run(workCtx, f, job)
	}()
}

// run calls the handler, keeps the job alive while it runs, and settles it.
func (w *Worker) run(workCtx context.Context, f *flight, job Job) {
	err := w.callHandler(workCtx, job)
	if err == nil {
		if f.settle(func(m jetstream.Msg) error { return m.Ack() }) {
			w.stats.add(job.Tenant, func(s *TenantStats) { s.Completed++ })
		}
		return
	}
	if workCtx.Err() != nil {
		// Shutdown cancelled the job: not its failure. Hand it back.
		f.settle(func(m jetstream.Msg) error { return m.Nak() })
		return
	}
	w.stats.add(job.Tenant, func(s *TenantStats) { s.Failed++ })
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
		w.deadLetterSync(workCtx, f.msg, job.ID, job.Tenant, fmt.Sprintf("handler failed %d times: %v", n, err), n)
		return
	}
	delay := w.retryDelay(n)
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
	f.settle(func(m jetstream.Msg) error {
		ds := []Deferral{{Msg: m, Job: job, Wait: delay}}
		w.deferrer.Defer(workCtx, ds)
		if ds[0].Moved {
			w.stats.add(job.Tenant, func(s *TenantStats) { s.Moved++ })
		}
		return ds[0].Err
	})
}

// retryDelay is the backoff before the retry after the n-th failure.
func (w *Worker) retryDelay(n int64) time.Duration {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     w.cfg.RetryInitial,
		RandomizationFactor: 0.2,
		Multiplier:          2,
		MaxInterval:         w.cfg.RetryMax,
		Clock:               backoff.SystemClock,
	}
	b.Reset()
	d := b.NextBackOff()
	for i := int64(1); i < n; i++ {
		d = b.NextBackOff()
	}
	return d
}

// keepAliveLoop tells JetStream every InProgressEvery that each job the
// worker holds is still alive (InProgress): running, waiting for a handler
// slot, or pulled and not yet decided (while Redis is down, say). A long
// handler, or a long wait behind long handlers, then outlives AckWait
// without a redelivery that would run the job twice. One ticker serves all
// jobs; a job held less than InProgressEvery needs nothing yet.
func (w *Worker) keepAliveLoop(done <-chan struct{}) {
	t := time.NewTicker(w.cfg.InProgressEvery)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			w.inflight.Range(func(k, _ any) bool {
				f := k.(*flight)
				if now.Sub(f.started) >= w.cfg.InProgressEvery && !f.settled.Load() {
					if err := f.msg.InProgress(); err != nil {
						w.log.Warn("in-progress signal failed", "subject", f.msg.Subject(), "err", err)
					}
				}
				return true
			})
			for _, msg := range w.held.pulledBy(now.Add(-w.cfg.InProgressEvery)) {
				if err := msg.InProgress(); err != nil {
					w.log.Warn("in-progress signal failed", "subject", msg.Subject(), "err", err)
				}
			}
		}
	}
}

// heldMsgs are the messages a worker has pulled and not yet acted on, with
// when each was pulled. Safe for concurrent use; the zero value is ready.
type heldMsgs struct {
	mu   sync.Mutex
	msgs map[jetstream.Msg]time.Time
}

// add records msg as pulled now.
func (h *heldMsgs) add(msg jetstream.Msg) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.msgs == nil {
		h.msgs = make(map[jetstream.Msg]time.Time)
	}
	h.msgs[msg] = time.Now()
}

// remove forgets msg.
func (h *heldMsgs) remove(msg jetstream.Msg) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.msgs, msg)
}

// count is how many messages are held.
func (h *heldMsgs) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.msgs)
}

// pulledBy returns the messages pulled at or before t.
func (h *heldMsgs) pulledBy(t time.Time) []jetstream.Msg {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []jetstream.Msg
	for msg, at := range h.msgs {
		if !at.After(t) {
			out = append(out, msg)
		}
	}
	return out
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

// deadLetterAsync dead-letters msg in its own goroutine.
func (w *Worker) deadLetterAsync(ctx context.Context, msg jetstream.Msg, id, tenant, reason string, failures int64) {
	w.handlers.Add(1)
	go func() {
		defer w.handlers.Done()
		w.deadLetterSync(ctx, msg, id, tenant, reason, failures)
	}()
}

// deadLetterBundle takes a fired bundle that cannot be read out of the way:
// to the dead-letter subject of the tenant its subject names, with the
// reason, its data kept whole, then out of the jobs stream, where a bundle
// counts as moved jobs still waiting.
func (w *Worker) deadLetterBundle(ctx context.Context, msg jetstream.Msg, cause error) {
	// The subject is <prefix>.u.<tenant>.<id>; the prefix may hold dots.
	t := ""
	if tokens := strings.Split(msg.Subject(), "."); len(tokens) >= 4 && tenant.Validate(tokens[len(tokens)-2]) == nil {
		t = tokens[len(tokens)-2]
	}
	if !w.deadLetterSync(ctx, msg, "", t, "unreadable bundle of moved jobs: "+cause.Error(), 0) {
		return
	}
	if err := deleteFromStream(ctx, w.js, msg); err != nil {
		w.log.Warn("deleting a dead-lettered bundle failed; it stays in the jobs stream, acked", "subject", msg.Subject(), "err", err)
	}
}

// deadLetterSync publishes msg to the dead-letter subject, then terminates
// it, and reports whether it did. If the publish fails the message is
// handed back with a delay, never terminated, so nothing is lost.
func (w *Worker) deadLetterSync(ctx context.Context, msg jetstream.Msg, id, tenant, reason string, failures int64) bool {
	if id == "" {
		if meta, err := msg.Metadata(); err == nil {
			id = fmt.Sprintf("%s:%d", meta.Stream, meta.Sequence.Stream)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := w.dlq.publish(pctx, msg, id, tenant, reason, failures)
	cancel()
	if err != nil {
		w.log.Error("dead-letter publish failed; handing the job back", "job", id, "err", err)
		if nerr := msg.NakWithDelay(w.cfg.RetryInitial); nerr != nil {
			w.log.Warn("hand back failed; JetStream redelivers after AckWait", "job", id, "err", nerr)
		}
		return false
	}
	w.stats.add(tenant, func(s *TenantStats) { s.DeadLettered++ })
	w.log.Warn("job dead-lettered", "job", id, "tenant", tenant, "reason", reason)
	term := msg.Term
	if w.cfg.TermWithReason {
		term = func() error { return msg.TermWithReason(truncate(reason, 256)) }
	}
	if err := term(); err != nil {
		w.log.Warn("term failed; JetStream redelivers after AckWait and the dead letter is deduplicated", "job", id, "err", err)
	}
	return true
}

// truncate shortens s to at most n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
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

package consumer

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/fastlane/fastcopy"
	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/throttle"
)

// groupDecider is the decide stage: it takes the pulled messages a group
// at a time and asks the Decider about each group in one round trip,
// minding paused tenants, the jobs kept for their slot (the short wait) and Redis's health.
type groupDecider struct {
	throttle Decider
	redis    *redisHealth // Redis answering decisions, its backoff and log summary (redishealth.go)
	short    *shortWait   // jobs kept for their slot (shortwait.go)
	pauses   *pauseGate
	pull     *puller
	lane     laneView // what the fast lane sees of the groups (lane.go)
	obs      Observer
	rec      *recorder
	cfg      Config
	log      *slog.Logger
}

// decideLoop decides the pulled messages a group at a time, each group in
// one round trip, and sends it to dispatch, until msgs is closed. The
// groups are read by readLoop, on a goroutine of its own, one group ahead:
// while a group is decided the next one is being read, so that the round
// trips follow one another without the reading in between. Once ctx is
// cancelled the groups are handed back instead.
func (gd *groupDecider) decideLoop(ctx context.Context, msgs <-chan jetstream.Msg, decided chan<- decidedGroup) {
	ready := make(chan struct{}, 1)
	groups := make(chan decidedGroup, 1)
	gate := &readGate{opened: make(chan struct{}, 1)}
	go gd.readLoop(ctx, msgs, gate, ready, groups)
	for {
		ready <- struct{}{}
		g, ok := <-groups
		if !ok {
			return
		}
		if ctx.Err() != nil {
			gd.pull.handBack(g.msgs())
			gd.pull.releaseCredits(g.credits)
			continue
		}
		gd.decide(ctx, &g)
		decided <- g
		if d := gd.lane.pause(g); d > 0 {
			gate.rest(ctx, d)
		}
		if g.redisWait > 0 {
			// Give Redis time to come back instead of pulling more jobs only
			// to defer them again.
			gate.rest(ctx, g.redisWait)
		}
	}
}

// readGate stops the reading while the deciding loop rests (the lane's
// pause after a flood's group, Redis's backoff), so that a rest leaves the
// CPU and the pulling alone, as when reading came after it.
type readGate struct {
	closed atomic.Bool
	opened chan struct{} // has a value once the gate opened again
}

// rest closes the gate for d, or until ctx is cancelled.
func (g *readGate) rest(ctx context.Context, d time.Duration) {
	g.closed.Store(true)
	sleep(ctx, d)
	g.closed.Store(false)
	select {
	case g.opened <- struct{}{}:
	default: // told already
	}
}

// readLoop reads the pulled messages into groups and hands each to
// decideLoop when it asks (ready), until msgs is closed; then it closes
// groups. A group takes every message that arrives until it is asked for,
// up to FetchBatch: as many as waited for the round trip before. It takes
// no message while gate is closed. Moved copies that came back before
// their slot, and jobs given a slot close at hand (act), wait in the
// worker's shortWait and join a group at their slot.
func (gd *groupDecider) readLoop(ctx context.Context, msgs <-chan jetstream.Msg, gate *readGate, ready <-chan struct{}, groups chan<- decidedGroup) {
	defer close(groups)
	short := gd.short
	defer func() { gd.pull.handBack(short.stop()) }()
	stopping := ctx.Done()
	next := gd.newReader(ctx)
	defer func() {
		// msgs is closed: the group read so far is still handed over.
		if !next.empty() {
			<-ready
			groups <- next.group()
		}
	}()
	for {
		in, asked := msgs, ready
		if gate.closed.Load() {
			in = nil
		} else if !next.takeWaiting(msgs) {
			// Every message already waiting joins the group before it may
			// be handed over.
			return
		}
		if next.credits >= gd.cfg.FetchBatch {
			in = nil // full: the next messages go to the group after
		}
		if next.empty() {
			asked = nil
		}
		select {
		case m, ok := <-in:
			if !ok {
				return
			}
			next.take(m)
		case <-short.due:
			for _, m := range short.Ready() {
				next.read(m)
			}
		case <-asked:
			groups <- next.group()
			next = gd.newReader(ctx)
		case <-gate.opened:
		case <-stopping:
			// Jobs kept for their slot go back at once: the worker will
			// not decide them.
			stopping = nil
			gd.pull.handBack(short.stop())
		}
	}
}

// item is one message of a dispatched group.
type item struct {
	msg  jetstream.Msg
	job  Job
	bad  *badJobError
	slot int64 // the slot a moved copy was scheduled for, µs; 0 otherwise
	// paused, when set, is the deferral of a job whose tenant is paused:
	// it is not decided.
	paused *Deferral
	// shortWaited reports that a paused job was kept in the worker for
	// its slot (shortWait): it has a reservation although it looks fresh.
	shortWaited bool
	// leases are the leases the job was admitted holding, under running
	// caps, noted with its decision.
	leases []throttle.Lease
	// asks says the job is decided (neither bad nor paused), as req.
	asks bool
	req  throttle.Copy
}

// groupReader reads the jobs of the next group as its messages arrive,
// each with what the decision will ask of it, so that a group is ready to
// be decided the moment it is asked for.
type groupReader struct {
	gd      *groupDecider
	ctx     context.Context // the loop's: once cancelled, messages go back unread
	items   []item
	credits int  // the fetch credits the group holds: its messages from msgs
	slots   bool // some item is a moved copy with its slot: sort them
}

// newReader starts reading a group; once ctx is cancelled it hands back
// what it takes instead.
func (gd *groupDecider) newReader(ctx context.Context) *groupReader {
	return &groupReader{gd: gd, ctx: ctx, items: make([]item, 0, gd.cfg.FetchBatch)}
}

// empty reports that the group holds nothing to decide and no credit.
func (r *groupReader) empty() bool { return len(r.items) == 0 && r.credits == 0 }

// take adds a message pulled from msgs, which holds a fetch credit: kept
// for its slot when it is a moved copy that came back before it
// (shortWait), read otherwise; handed back once the loop's ctx is
// cancelled.
func (r *groupReader) take(m jetstream.Msg) {
	if r.ctx.Err() != nil {
		// The worker will not decide it.
		r.gd.pull.handBack([]jetstream.Msg{m})
		r.gd.pull.releaseCredits(1)
		return
	}
	r.credits++
	if !r.gd.short.keepEarly(m) {
		r.read(m)
	}
}

// takeWaiting takes the messages already waiting in msgs, up to
// FetchBatch; false once msgs is closed.
func (r *groupReader) takeWaiting(msgs <-chan jetstream.Msg) bool {
	for r.credits < r.gd.cfg.FetchBatch {
		select {
		case m, ok := <-msgs:
			if !ok {
				return false
			}
			r.take(m)
		default:
			return true
		}
	}
	return true
}

// read adds the job of m to the group, with its request to the Decider
// unless it is bad or its tenant is paused. A message that is no
// JetStream message we can read is handed back.
func (r *groupReader) read(m jetstream.Msg) {
	gd := r.gd
	job, err := readJob(m, gd.cfg)
	if !gd.short.readBefore(m) {
		gd.rec.arrived(job)
	}
	var bad *badJobError
	switch {
	case errors.As(err, &bad):
		r.items = append(r.items, item{msg: m, job: job, bad: bad})
		return
	case err != nil:
		gd.log.Error("unreadable message; handing it back", "subject", m.Subject(), "err", err)
		gd.pull.handBack([]jetstream.Msg{m})
		return
	}
	slot, _ := strconv.ParseInt(m.Headers().Get(header.Slot), 10, 64)
	r.slots = r.slots || slot != 0
	it := item{msg: m, job: job, slot: slot}
	if d, paused := gd.pauses.pausedNow(job); paused {
		// Not charged while paused: on resume the tenant takes no more
		// than its buckets hold.
		it.paused = &d
		it.shortWaited = gd.short.decidedAgain(m)
		r.items = append(r.items, it)
		return
	}
	// A message on its first delivery that is not a moved copy was never
	// decided, so it holds no reservation for the script to read. One the
	// worker kept for its slot (shortWait) was decided already.
	again := gd.short.decidedAgain(m)
	fresh := job.Delivered == 1 && job.Header.Get(header.JobID) == "" && !again
	// A fresh original never records itself as owner, and owners are
	// stream sequences (never 0): 0 serves it and keeps the script's cheap
	// path for the usual value.
	var inc int64
	if !fresh {
		inc = incarnation(job)
	}
	it.asks = true
	it.req = throttle.Copy{Request: throttle.Request{Tenant: job.Tenant, JobID: job.ID, Cost: job.Cost}, Group: job.Group,
		Incarnation: inc, Fresh: fresh, Order: fastcopy.Ordinary(job.OriginalSequence()),
		Woken: job.Header.Get(header.Woken) != "", Released: releasedByTopUp(job, gd.cfg.Now())}
	r.items = append(r.items, it)
}

// group returns the group read, its moved copies put back in slot order
// so that a tenant's jobs keep their reservation order, and tells the
// fast lane of it.
func (r *groupReader) group() decidedGroup {
	items := r.items
	if r.slots {
		sort.SliceStable(items, func(i, j int) bool { return items[i].slot < items[j].slot })
	}
	r.gd.lane.observe(items)
	g := decidedGroup{items: items, idx: make([]int, 0, len(items)), credits: r.credits}
	for i := range items {
		if items[i].asks {
			g.idx = append(g.idx, i)
		}
	}
	return g
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
	// redisBack says Redis answered this group after failing for earlier
	// ones: act logs the next failure at once.
	redisBack bool
}

// msgs returns the messages of the group's jobs.
func (g decidedGroup) msgs() []jetstream.Msg {
	out := make([]jetstream.Msg, len(g.items))
	for i := range g.items {
		out[i] = g.items[i].msg
	}
	return out
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

// decide decides the jobs of g that ask it in one round trip.
func (gd *groupDecider) decide(ctx context.Context, g *decidedGroup) {
	if len(g.idx) == 0 {
		return
	}
	reqs := make([]throttle.Copy, len(g.idx))
	for k, i := range g.idx {
		reqs[k] = g.items[i].req
	}
	dctx, cancel := context.WithTimeout(ctx, gd.cfg.RedisTimeout)
	// Timed by the monotonic clock, not Config.Now: this measures, it
	// decides nothing.
	began := time.Now()
	g.results = gd.throttle.DecideBatch(dctx, reqs)
	gd.obs.ObserveDecision(time.Since(began))
	cancel()
	redisFailed := false
	for k := range g.results {
		res := &g.results[k]
		if res.Err != nil && !errors.Is(res.Err, throttle.ErrInvalid) && ctx.Err() == nil {
			redisFailed = true
		}
		if res.Err == nil && res.Outcome == throttle.Admitted {
			g.items[g.idx[k]].leases = res.Leases()
		}
	}
	g.redisWait, g.redisBack = gd.redis.decided(redisFailed)
}

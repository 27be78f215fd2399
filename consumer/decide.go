package consumer

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/throttler/throttler/fastlane/fastcopy"
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

// decideLoop takes the pulled messages a group at a time (every message
// already waiting, up to FetchBatch), decides each group in one round trip
// and sends it to dispatch, until msgs is closed. Moved copies that came
// back before their slot, and jobs given a slot close at hand (act), wait
// in the worker's shortWait and are decided at their slot. Once ctx is cancelled it hands back what it takes instead.
func (gd *groupDecider) decideLoop(ctx context.Context, msgs <-chan jetstream.Msg, decided chan<- decidedGroup) {
	short := gd.short
	defer func() { gd.pull.handBack(short.stop()) }()
	stopping := ctx.Done()
	for {
		var group []jetstream.Msg
		credits := 0 // the fetch credits the group holds: those of msgs
		select {
		case msg, ok := <-msgs:
			if !ok {
				return
			}
			group = gd.pull.drain(msg, msgs)
			credits = len(group)
			group = append(short.take(group), short.Ready()...)
		case <-short.due:
			group = short.Ready()
		case <-stopping:
			// Jobs kept for their slot go back at once: the worker will
			// not decide them.
			stopping = nil
			gd.pull.handBack(short.stop())
			continue
		}
		if ctx.Err() != nil {
			gd.pull.handBack(group)
			gd.pull.releaseCredits(credits)
			continue
		}
		g := gd.decide(ctx, group)
		g.credits = credits
		decided <- g
		if d := gd.lane.pause(g); d > 0 {
			sleep(ctx, d)
		}
		if g.redisWait > 0 {
			// Give Redis time to come back instead of pulling more jobs only
			// to defer them again.
			sleep(ctx, g.redisWait)
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
}

// readGroup reads the jobs of a group. Copies of moved jobs that fired
// together are put back in slot order, so a tenant's jobs keep their
// reservation order.
func (gd *groupDecider) readGroup(group []jetstream.Msg) []item {
	items := make([]item, 0, len(group))
	for _, m := range group {
		job, err := readJob(m, gd.cfg)
		if !gd.short.readBefore(m) {
			gd.rec.arrived(job)
		}
		var bad *badJobError
		switch {
		case errors.As(err, &bad):
			items = append(items, item{msg: m, job: job, bad: bad})
		case err != nil:
			// Not a JetStream message we can read: hand it back.
			gd.log.Error("unreadable message; handing it back", "subject", m.Subject(), "err", err)
			gd.pull.handBack([]jetstream.Msg{m})
		default:
			slot, _ := strconv.ParseInt(m.Headers().Get(HeaderSlot), 10, 64)
			items = append(items, item{msg: m, job: job, slot: slot})
		}
	}
	gd.lane.observe(items)
	sort.SliceStable(items, func(i, j int) bool { return items[i].slot < items[j].slot })
	return items
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
func (gd *groupDecider) decide(ctx context.Context, group []jetstream.Msg) decidedGroup {
	g := decidedGroup{items: gd.readGroup(group), credits: len(group)}
	reqs := make([]throttle.Copy, 0, len(g.items))
	g.idx = make([]int, 0, len(g.items))
	for i := range g.items {
		it := &g.items[i]
		if it.bad != nil {
			continue
		}
		if d, paused := gd.pauses.pausedNow(it.job); paused {
			// Not charged while paused: on resume the tenant takes no
			// more than its buckets hold.
			it.paused = &d
			it.shortWaited = gd.short.decidedAgain(it.msg)
			continue
		}
		// A message on its first delivery that is not a moved copy was never
		// decided, so it holds no reservation for the script to read.
		// One the worker kept for its slot (shortWait) was decided already.
		again := gd.short.decidedAgain(it.msg)
		fresh := it.job.Delivered == 1 && it.job.Header.Get(HeaderJobID) == "" && !again
		// A fresh original never records itself as owner, and owners are
		// stream sequences (never 0): 0 serves it and keeps the script's
		// cheap path for the usual value.
		var inc int64
		if !fresh {
			inc = incarnation(it.job)
		}
		reqs = append(reqs, throttle.Copy{Request: throttle.Request{Tenant: it.job.Tenant, JobID: it.job.ID, Cost: it.job.Cost}, Group: it.job.Group,
			Incarnation: inc, Fresh: fresh, Order: fastcopy.Ordinary(it.job.OriginalSequence()),
			Woken: it.job.Header.Get(HeaderWoken) != "", Released: releasedByTopUp(it.job, gd.cfg.Now())})
		g.idx = append(g.idx, i)
	}
	if len(reqs) == 0 {
		return g
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
	return g
}

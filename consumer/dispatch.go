package consumer

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/throttler/throttler/fastlane/fastcopy"
	"github.com/throttler/throttler/throttle"
)

// dispatcher is the dispatch stage: it acts on each decided group,
// starting the admitted jobs' handlers in their slots, parking capped
// jobs, dead-lettering bad ones and handing the others' deferrals on.
type dispatcher struct {
	hand   *inHand
	early  *earlyHold
	pull   *puller
	redis  *redisHealth
	pauses *pauseGate
	holds  *downstreamHolds
	caps   *capKeeper
	dlq    *deadLetter
	top    *topReporter
	defers *deferSettler
	runs   *handlerRunner
	fast   *laneAdapter
	obs    Observer
	stats  *Stats
	cfg    Config
	log    *slog.Logger
}

// startDispatching acts on each group sent on decided, in order, until
// decided is closed: it starts the admitted jobs and sends the others'
// deferrals to batches. done is closed after the last group.
func (dp *dispatcher) startDispatching(ctx, work context.Context, batches chan<- deferBatch) (decided chan<- decidedGroup, done <-chan struct{}) {
	// Acting on a group runs beside deciding, so the next group is decided
	// meanwhile.
	in := make(chan decidedGroup, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for g := range in {
			batches <- deferBatch{deferrals: dp.act(ctx, work, g), credits: g.credits, unreserve: pausedSlots(g.items)}
		}
	}()
	return in, finished
}

// act acts on each decision of a group: start, ack a duplicate, or
// dead-letter. It returns the limited jobs, in slot order, for the defer
// loop.
func (dp *dispatcher) act(ctx, workCtx context.Context, g decidedGroup) []Deferral {
	items := g.items
	for _, it := range items {
		dp.hand.pulled.remove(it.msg) // settled below, or a flight
	}
	var deferrals []Deferral
	// Admitted jobs are started after the loop, taking the tenants in turn.
	var admitted []*item
	var (
		redisFailed int   // jobs Redis failed to decide
		redisErr    error // the first such failure
	)
	var wake []throttle.Waiter
	for k, i := range g.idx {
		it := &items[i]
		res := g.results[k]
		wake = append(wake, res.Wake...)
		dp.stats.Add(it.job.Tenant, func(s *TenantStats) { s.RedisCalls++ })
		switch {
		case res.Err == nil && res.Outcome == throttle.Duplicate && fastcopy.IsCopy(res.Owner):
			// The fast lane claimed this job for its copy.
			dp.fast.settleClaimed(workCtx, it.msg, it.job)
		case res.Err == nil && res.Outcome == throttle.Duplicate:
			// Another incarnation of this moved job already ran.
			dp.log.Warn("duplicate of a moved job; acking it without running", "tenant", it.job.Tenant, "job", it.job.ID,
				"incarnation", incarnation(it.job), "moves", it.job.Deferrals, "owner", res.Owner)
			dp.stats.Add(it.job.Tenant, func(s *TenantStats) { s.Duplicates++ })
			dp.settle(it.msg, func(m jetstream.Msg) error { return m.Ack() })
		case res.Err == nil && res.Outcome == throttle.Capped:
			deferrals = append(deferrals, dp.caps.park(it, res.Decision))
		case res.Err == nil && res.Outcome == throttle.Admitted:
			if res.ShadowWait > 0 {
				dp.stats.Add(it.job.Tenant, func(s *TenantStats) { s.ShadowLimited++; s.ShadowWait += res.ShadowWait })
			}
			it.leases = res.Leases()
			admitted = append(admitted, it)
		case res.Err == nil && dp.holdUntilSlot(it, res.Decision):
			// Its slot is close: it waits in the worker, not in NATS.
			dp.stats.Add(it.job.Tenant, func(s *TenantStats) { s.Deferred++ })
			dp.obs.ObserveThrottleWait(res.Wait)
		case res.Err == nil:
			dp.stats.Add(it.job.Tenant, func(s *TenantStats) { s.Deferred++ })
			deferrals = append(deferrals, Deferral{Msg: it.msg, Job: it.job, Wait: res.Wait, Reason: waitReason(res.Decision)})
		case errors.Is(res.Err, throttle.ErrInvalid):
			it.bad = &badJobError{tenant: it.job.Tenant, reason: res.Err.Error()}
		case ctx.Err() != nil:
			// The worker is stopping and cut the decision short.
			dp.pull.handBack([]jetstream.Msg{it.msg})
		default:
			dp.stats.Add(it.job.Tenant, func(s *TenantStats) { s.RedisErrors++ })
			if redisErr == nil {
				redisErr = res.Err
			}
			redisFailed++
			if dp.cfg.OnRedisError == AllowOnRedisError {
				dp.log.Debug("redis failed; admitting job by policy", "tenant", it.job.Tenant, "job", it.job.ID, "err", res.Err)
				dp.stats.Add(it.job.Tenant, func(s *TenantStats) { s.AllowedOnRedisError++ })
				admitted = append(admitted, it)
				continue
			}
			// Redis failed while ctx was live, so decide set redisWait.
			wait := g.redisWait
			dp.log.Debug("redis failed; deferring job", "tenant", it.job.Tenant, "job", it.job.ID, "retry_in", wait, "err", res.Err)
			dp.settle(it.msg, func(m jetstream.Msg) error { return m.NakWithDelay(wait) })
		}
	}
	// One line when Redis starts failing, then a summary now and then.
	dp.redis.dispatched(g.redisBack, redisFailed, redisErr, g.redisWait)
	for i := range items {
		if it := &items[i]; it.paused != nil {
			deferrals = append(deferrals, dp.pausedDeferral(it, *it.paused))
		}
	}
	for _, it := range items {
		if it.bad != nil {
			dp.dlq.settleAsync(workCtx, it.msg, it.job.ID, it.bad.tenant, it.bad.reason, 0)
		}
	}
	// Every admitted job is a flight, kept alive, from now: the later ones
	// may wait long for a slot while long jobs run.
	order := tenantsInTurn(admitted)
	flights := make([]*flight, len(order))
	now := dp.cfg.Now()
	for i, it := range order {
		flights[i] = &flight{msg: it.msg, started: now, log: dp.log, leases: it.leases}
		if len(it.leases) > 0 {
			dp.stats.Add(it.job.Tenant, func(s *TenantStats) { s.Running++ })
		}
		dp.hand.flights.Store(flights[i], struct{}{})
	}
	dp.caps.wake(workCtx, wake)
	for i, it := range order {
		dp.start(ctx, workCtx, flights[i], it.job)
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

// flight is one job whose handler is running. Exactly one settlement wins:
// the handler's outcome, or the shutdown's hand-back.
type flight struct {
	msg     jetstream.Msg
	started time.Time
	settled atomic.Bool
	log     *slog.Logger
	leases  []throttle.Lease // held under running caps until the job ends
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

// settle settles msg with f. A failure is logged: the message stays pending
// and JetStream redelivers it after AckWait.
func (dp *dispatcher) settle(msg jetstream.Msg, f func(jetstream.Msg) error) {
	if err := f(msg); err != nil {
		dp.log.Warn("settling a message failed; JetStream redelivers it after AckWait", "subject", msg.Subject(), "err", err)
	}
}

// waitReason says what held a limited job, for HeaderWaitReason.
func waitReason(d throttle.Decision) string {
	if d.HeldBy == (throttle.Limit{}) {
		return "the slot it holds"
	}
	return "limit " + d.HeldBy.String()
}

// start runs the handler of an admitted job, its flight f already in
// inflight, in its own goroutine once one of the Concurrency slots is free,
// holding the slot until the job is settled. If the worker stops first, the
// job is handed back.
func (dp *dispatcher) start(ctx, workCtx context.Context, f *flight, job Job) {
	select {
	case dp.runs.slots <- struct{}{}:
	case <-ctx.Done():
		dp.hand.flights.Delete(f)
		f.settle(func(m jetstream.Msg) error { return m.Nak() })
		dp.caps.finishLeases(workCtx, f, job.Tenant)
		return
	}
	dp.stats.Add(job.Tenant, func(s *TenantStats) { s.Admitted++ })
	dp.top.waiting.admitted(job.Tenant, dp.cfg.Now())
	dp.runs.handlers.Add(1)
	go func() {
		defer dp.runs.handlers.Done()
		defer func() { <-dp.runs.slots }()
		defer dp.hand.flights.Delete(f)
		defer dp.caps.finishLeases(workCtx, f, job.Tenant)
		if d, paused := dp.pauses.pausedNow(job); paused {
			// Admitted before an operator paused its tenant.
			dp.defers.waitOutPause(workCtx, f, job, d)
			return
		}
		if until, held := dp.holds.after(job.Tenant, dp.cfg.Now()); held {
			// Admitted before its downstream asked to wait.
			dp.stats.Add(job.Tenant, func(s *TenantStats) { s.HeldBack++ })
			dp.defers.waitOutHold(workCtx, f, job, until)
			return
		}
		dp.runs.run(workCtx, f, job)
	}()
}

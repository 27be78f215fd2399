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

// lifecycle takes each decided job through the rest of its life, in one
// place: the stages it passes, in their order. Each stage is the
// component that owns its state; adding one is adding a component and a
// line to stagesInOrder.
//
// A decided job ends its decision at the first stage that takes it
// (stagesInOrder): claimed by the fast lane, a duplicate, parked (capped,
// queued under a level, unfunded), admitted, dead-lettered, kept for a
// slot close at hand, deferred until its slot, or, not decided, handed
// back or put off by the Redis error policy. A job whose tenant is paused
// was not decided: deferred as paused (pauseGate).
//
// An admitted job then waits for a handler slot (start), and:
//
//  1. paused since?   deferred as paused (pauseGate)
//  2. held since?     deferred until the hold ends (downstreamHolds)
//  3. run             the handler, then ack, retry, hold off or
//     dead-letter (handlerRunner)
//  4. leases given back, and the jobs whose turn that makes woken (capKeeper)
//
// Every deferral is settled by the defer loop (deferSettler): NAK, move
// or park. Every count goes to the recorder.
type lifecycle struct {
	stages []step           // a decided job's stages, in their order (stagesInOrder)
	pull   *puller          // the pulled messages, and handing back (fetch.go)
	hand   *inHand          // the flights, kept alive (keepalive.go)
	redis  *redisHealth     // Redis answering decisions (redishealth.go)
	pauses *pauseGate       // paused tenants (pause.go)
	holds  *downstreamHolds // held tenants (holds.go)
	caps   *capKeeper       // leases given back, wakes (caps.go)
	levels *levelKeeper     // turns under shared levels (levels.go)
	dlq    *deadLetter      // dead letters (deadletter.go)
	runs   *handlerRunner   // handlers run, and their jobs settled (run.go)
	rec    *recorder
	cfg    Config
	log    *slog.Logger
}

// A stage is one of the steps a decided job can end its decision at, the
// component that owns its state: take acts on the job (parks, defers,
// admits, dead-letters or hands it back), noting in g what the group must
// do after its last job. It may decline the job (false): the next stage
// whose condition the job meets is asked.
type stage interface {
	take(g *groupActs, it *item, res throttle.Result) bool
}

// step is a stage and the results it is asked about.
type step struct {
	when  func(g *groupActs, res throttle.Result) bool
	stage stage
}

// stagesInOrder lists the stages a decided job can end its decision at,
// in the order they are asked: the first whose condition the job meets
// and that takes it settles its fate. The conditions are here, not in the
// components, so that a job enters only the files of its own stages.
func stagesInOrder(fast *laneAdapter, dups duplicates, caps *capKeeper, levels *levelKeeper, credits unfunded,
	runs *handlerRunner, dlq *deadLetter, short *shortWait, defers *deferSettler, pull *puller, redis *redisHealth) []step {
	return []step{
		{laneClaim, fast},                       // claimed by the fast lane for its copy: the lane settles it (lane.go)
		{decidedAs(throttle.Duplicate), dups},   // another incarnation of this moved job ran: acked unrun (duplicate.go)
		{decidedAs(throttle.Capped), caps},      // capped: parked until woken for a lease (caps.go)
		{decidedAs(throttle.Queued), levels},    // queued under a shared level: parked until its turn (levels.go)
		{decidedAs(throttle.Unfunded), credits}, // unfunded: parked for a top-up, or a dead letter (credits.go)
		{decidedAs(throttle.Admitted), runs},    // admitted: started after the group (run.go)
		{refused, dlq},                          // invalid, or over a window that refuses: dead-lettered (deadletter.go)
		{decidedAs(throttle.Reserved), short},   // its slot close at hand: kept in the worker for it (shortwait.go)
		{decided, defers},                       // limited: deferred until its slot (deferloop.go)
		{stopping, pull},                        // not decided, the worker stopping: handed back (fetch.go)
		{notDecided, redis},                     // not decided, Redis failed: admitted or put off by policy (redishealth.go)
	}
}

// groupActs is what a decided group's stages leave to be done after its
// last job: the jobs to defer and to start, and Redis's failures.
type groupActs struct {
	ctx  context.Context // stops the pulling: done once the worker is stopping
	work context.Context // stops the settling, after the shutdown timeout
	// redisWait is how long the jobs Redis failed for are put off
	// (decidedGroup.redisWait).
	redisWait time.Duration

	deferrals   []Deferral // the jobs to defer, in the group's order
	admitted    []*item    // the jobs to start after the group
	redisFailed int        // jobs Redis failed to decide
	redisErr    error      // the first such failure
}

// decidedAs is the condition of the results the throttle decided with
// outcome o.
func decidedAs(o throttle.Outcome) func(*groupActs, throttle.Result) bool {
	return func(_ *groupActs, res throttle.Result) bool { return res.Err == nil && res.Outcome == o }
}

// laneClaim: the job is a duplicate whose owner is a fast lane's copy.
func laneClaim(_ *groupActs, res throttle.Result) bool {
	return res.Err == nil && res.Outcome == throttle.Duplicate && fastcopy.IsCopy(res.Owner)
}

// refused: the throttle found the job invalid, or it is over a calendar
// window that refuses, not defers, the jobs over it (window:N/UNIT:dlq).
func refused(_ *groupActs, res throttle.Result) bool {
	if res.Err != nil {
		return errors.Is(res.Err, throttle.ErrInvalid)
	}
	return res.Outcome == throttle.Limited && res.Binding.DeadLetter
}

// decided: the throttle answered for the job.
func decided(_ *groupActs, res throttle.Result) bool { return res.Err == nil }

// stopping: the worker is stopping and cut the job's decision short.
func stopping(g *groupActs, res throttle.Result) bool { return res.Err != nil && g.ctx.Err() != nil }

// notDecided: Redis failed to decide the job.
func notDecided(_ *groupActs, res throttle.Result) bool { return res.Err != nil }

// settleOrLog settles msg with f. A failure is logged: the message stays
// pending and JetStream redelivers it after AckWait.
func settleOrLog(log *slog.Logger, msg jetstream.Msg, f func(jetstream.Msg) error) {
	if err := f(msg); err != nil {
		log.Warn("settling a message failed; JetStream redelivers it after AckWait", "subject", msg.Subject(), "err", err)
	}
}

// startDispatching acts on each group sent on decided, in order, until
// decided is closed: it starts the admitted jobs and sends the others'
// deferrals to batches. done is closed after the last group.
func (l *lifecycle) startDispatching(ctx, work context.Context, batches chan<- deferBatch) (decided chan<- decidedGroup, done <-chan struct{}) {
	// Acting on a group runs beside deciding, so the next group is decided
	// meanwhile.
	in := make(chan decidedGroup, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for g := range in {
			b := l.act(ctx, work, g)
			if len(b.deferrals) == 0 && len(b.unreserve) == 0 {
				// Nothing to defer: the group's messages are all settled or
				// started, its credits free now.
				l.pull.releaseCredits(b.credits)
				continue
			}
			batches <- b
		}
	}()
	return in, finished
}

// act takes each job of a decided group through its stages (see
// lifecycle). It returns the group's batch for the defer loop: the jobs
// to defer, decided ones in slot order then paused ones, the paused ones'
// slots to give up, and the group's credits.
func (l *lifecycle) act(ctx, workCtx context.Context, dg decidedGroup) deferBatch {
	items := dg.items
	for _, it := range items {
		l.pull.actedOn(it.msg) // settled below, or a flight
	}
	g := &groupActs{ctx: ctx, work: workCtx, redisWait: dg.redisWait}
	var wake, called []throttle.Waiter
	for k, i := range dg.idx {
		it := &items[i]
		res := dg.results[k]
		wake = append(wake, res.Wake...)
		called = append(called, res.Called...)
		if res.Err == nil && res.LevelName != "" {
			l.levels.decided(res.Decision)
		}
		l.rec.add(it.job.Tenant, func(s *TenantStats) { s.RedisCalls++ })
		for _, s := range l.stages {
			if s.when(g, res) && s.stage.take(g, it, res) {
				break
			}
		}
	}
	if g.redisFailed > 0 || dg.redisBack {
		// One line when Redis starts failing, then a summary now and then.
		l.redis.dispatched(dg.redisBack, g.redisFailed, g.redisErr, dg.redisWait)
	}
	deferrals := g.deferrals
	var unreserve []throttle.Slot
	for i := range items {
		if it := &items[i]; it.paused != nil {
			deferrals = append(deferrals, l.pausedDeferral(it, *it.paused))
			if s, ok := pausedSlot(it); ok {
				unreserve = append(unreserve, s)
			}
		}
	}
	for _, it := range items {
		if it.bad != nil {
			l.dlq.settleAsync(workCtx, it.msg, it.job.ID, it.bad.tenant, it.bad.reason, 0)
		}
	}
	// Every admitted job is a flight, kept alive, from now: the later ones
	// may wait long for a slot while long jobs run.
	order := tenantsInTurn(g.admitted)
	flights := make([]*flight, len(order))
	now := l.cfg.Now()
	for i, it := range order {
		flights[i] = &flight{msg: it.msg, started: now, log: l.log, leases: it.leases}
		if len(it.leases) > 0 {
			l.rec.add(it.job.Tenant, func(s *TenantStats) { s.Running++ })
		}
		l.hand.flights.Store(flights[i], struct{}{})
	}
	if len(wake) > 0 {
		l.caps.wake(workCtx, wake)
	}
	if len(called) > 0 {
		l.levels.wake(workCtx, ctx.Done(), called)
	}
	for i, it := range order {
		l.start(ctx, workCtx, flights[i], it.job)
	}
	return deferBatch{deferrals: deferrals, unreserve: unreserve, credits: dg.credits}
}

// start runs the handler of an admitted job, its flight f already in
// flight, in its own goroutine once one of the Concurrency slots is free,
// holding the slot until the job is settled (stages 1 to 4 of lifecycle). If the
// worker stops first, the job is handed back.
func (l *lifecycle) start(ctx, workCtx context.Context, f *flight, job Job) {
	select {
	case l.runs.slots <- struct{}{}:
	case <-ctx.Done():
		l.hand.flights.Delete(f)
		f.settle(func(m jetstream.Msg) error { return m.Nak() })
		if len(f.leases) > 0 {
			l.caps.finishLeases(workCtx, f, job.Tenant)
		}
		return
	}
	l.rec.admitted(job.Tenant)
	l.runs.handlers.Add(1)
	go func() {
		defer l.runs.handlers.Done()
		defer func() { <-l.runs.slots }()
		defer l.hand.flights.Delete(f)
		if len(f.leases) > 0 {
			defer l.caps.finishLeases(workCtx, f, job.Tenant) // 4.
		}
		if l.stoppedSince(workCtx, f, job) {
			return
		}
		l.runs.run(workCtx, f, job) // 3.
	}()
}

// stoppedSince defers job, admitted, if its tenant was paused or held
// since (stages 1 and 2), and reports whether it did. Its deferrals stay
// in its own frame, not the handler goroutine's: that goroutine starts on
// a small stack, and the handler and the ack must not have to grow it.
func (l *lifecycle) stoppedSince(workCtx context.Context, f *flight, job Job) bool {
	if d, paused := l.pauses.pausedNow(job); paused {
		// 1. Admitted before an operator paused its tenant.
		l.pauses.waitOut(workCtx, f, job, d)
		return true
	}
	if until, held := l.holds.after(job.Tenant, l.cfg.Now()); held {
		// 2. Admitted before its downstream asked to wait.
		l.rec.add(job.Tenant, func(s *TenantStats) { s.HeldBack++ })
		l.holds.waitOut(workCtx, f, job, until)
		return true
	}
	return false
}

// pausedDeferral is the deferral of a pulled job whose tenant is paused,
// decided without asking the throttle: it is not charged, and waits off
// the consumer as a parked copy of its own.
func (l *lifecycle) pausedDeferral(it *item, d Deferral) Deferral {
	l.rec.add(it.job.Tenant, func(s *TenantStats) { s.Paused++ })
	d.Msg, d.Job = it.msg, it.job
	return d
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

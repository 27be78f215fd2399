package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/throttler/throttler/fastlane/fastcopy"
	"github.com/throttler/throttler/throttle"
)

// lifecycle takes each decided job through the rest of its life, in one
// place: the stages it passes, in their order, each a call into the
// component that owns that stage's state. Adding a stage is adding a
// component and a line here.
//
// For a job the throttle decided (act):
//
//  1. claimed by the fast lane?  the lane settles it (laneAdapter)
//  2. a duplicate?               acked unrun (settle)
//  3. capped?                    parked until woken (capKeeper.park)
//     queued under a level?      parked until its turn (levelKeeper.park)
//     unfunded?                  parked for a top-up, or a dead letter
//  4. rate: admitted?            a flight, started below
//     slot close at hand?        kept for it in the worker (shortWait)
//     else                       deferred until its slot (deferSettler)
//  5. bad?                       dead-lettered (deadLetter)
//  6. not decided: stopping?     handed back (puller.handBack)
//     Redis failed?              admitted or put off by policy (redisHealth)
//
// A job whose tenant is paused was not decided: deferred as paused
// (pauseGate). An admitted job waits for a handler slot (start), then:
//
//  7. paused since?              deferred as paused (deferSettler)
//  8. held since?                deferred until the hold ends (deferSettler)
//  9. run                        the handler, then ack, retry, hold off or
//     dead-letter (handlerRunner)
//  10. leases given back         the jobs whose turn that makes woken (capKeeper)
//
// Every deferral is settled by the defer loop (deferSettler): NAK, move
// or park. Every count goes to the recorder.
type lifecycle struct {
	pull   *puller          // the pulled messages, and handing back (fetch.go)
	hand   *inHand          // the flights, kept alive (keepalive.go)
	short  *shortWait       // jobs kept for a slot close at hand (shortwait.go)
	redis  *redisHealth     // Redis answering decisions (redishealth.go)
	pauses *pauseGate       // paused tenants (pause.go)
	holds  *downstreamHolds // held tenants (holds.go)
	caps   *capKeeper       // parking, leases, wakes (caps.go)
	levels *levelKeeper     // turns under shared levels (levels.go)
	dlq    *deadLetter      // dead letters (deadletter.go)
	defers *deferSettler    // deferrals settled (deferloop.go)
	runs   *handlerRunner   // handlers run, and their jobs settled (run.go)
	fast   *laneAdapter     // the fast lane's claims (lane.go)
	obs    Observer
	rec    *recorder
	cfg    Config
	log    *slog.Logger
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
func (l *lifecycle) act(ctx, workCtx context.Context, g decidedGroup) deferBatch {
	items := g.items
	for _, it := range items {
		l.pull.actedOn(it.msg) // settled below, or a flight
	}
	var deferrals []Deferral
	// Admitted jobs are started after the loop, taking the tenants in turn.
	var admitted []*item
	var (
		redisFailed int   // jobs Redis failed to decide
		redisErr    error // the first such failure
	)
	var wake, called []throttle.Waiter
	for k, i := range g.idx {
		it := &items[i]
		res := g.results[k]
		wake = append(wake, res.Wake...)
		called = append(called, res.Called...)
		if res.Err == nil && res.LevelName != "" {
			l.levels.decided(res.Decision)
		}
		l.rec.add(it.job.Tenant, func(s *TenantStats) { s.RedisCalls++ })
		switch {
		case res.Err == nil && res.Outcome == throttle.Duplicate && fastcopy.IsCopy(res.Owner):
			// 1. The fast lane claimed this job for its copy.
			l.fast.settleClaimed(workCtx, it.msg, it.job)
		case res.Err == nil && res.Outcome == throttle.Duplicate:
			// 2. Another incarnation of this moved job already ran.
			l.duplicate(it, res.Owner)
		case res.Err == nil && res.Outcome == throttle.Capped:
			// 3.
			deferrals = append(deferrals, l.caps.park(it, res.Decision))
		case res.Err == nil && res.Outcome == throttle.Queued:
			// 3c. Waiting for its turn under a shared level (levels.go).
			deferrals = append(deferrals, l.levels.park(it, res.Decision))
		case res.Err == nil && res.Outcome == throttle.Unfunded:
			// 3b. Its tenant's credits cannot cover it (credits.go).
			if d, ok := l.unfunded(it, res.Decision); ok {
				deferrals = append(deferrals, d)
			}
		case res.Err == nil && res.Outcome == throttle.Admitted:
			// 4.
			if res.ShadowWait > 0 || res.ShadowUnfunded {
				l.rec.add(it.job.Tenant, func(s *TenantStats) { s.ShadowLimited++; s.ShadowWait += res.ShadowWait })
			}
			admitted = append(admitted, it) // its leases noted when decided
		case res.Err == nil && res.Outcome == throttle.Limited && res.Binding.DeadLetter:
			// 5. Over a calendar window that refuses, not defers, the jobs
			// over it (window:N/UNIT:dlq): dead-lettered, uncharged.
			it.bad = &badJobError{tenant: it.job.Tenant, reason: fmt.Sprintf("over %s: the window resets at %s",
				res.Binding, l.cfg.Now().Add(res.Wait).UTC().Format(time.RFC3339))}
		case res.Err == nil && l.short.keepReserved(it.msg, res.Decision):
			// 4. Its slot is close: it waits in the worker, not in NATS.
			l.rec.add(it.job.Tenant, func(s *TenantStats) { s.Deferred++ })
			l.obs.ObserveThrottleWait(res.Wait)
		case res.Err == nil:
			// 4.
			l.rec.add(it.job.Tenant, func(s *TenantStats) { s.Deferred++ })
			deferrals = append(deferrals, Deferral{Msg: it.msg, Job: it.job, Wait: res.Wait, Reason: waitReason(res.Decision)})
		case errors.Is(res.Err, throttle.ErrInvalid):
			// 5., below.
			it.bad = &badJobError{tenant: it.job.Tenant, reason: res.Err.Error()}
		case ctx.Err() != nil:
			// 6. The worker is stopping and cut the decision short.
			l.pull.handBack([]jetstream.Msg{it.msg})
		default:
			// 6.
			if redisErr == nil {
				redisErr = res.Err
			}
			redisFailed++
			if l.redisFailed(it, res.Err, g.redisWait) {
				admitted = append(admitted, it)
			}
		}
	}
	if redisFailed > 0 || g.redisBack {
		// One line when Redis starts failing, then a summary now and then.
		l.redis.dispatched(g.redisBack, redisFailed, redisErr, g.redisWait)
	}
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
			// 5.
			l.dlq.settleAsync(workCtx, it.msg, it.job.ID, it.bad.tenant, it.bad.reason, 0)
		}
	}
	// Every admitted job is a flight, kept alive, from now: the later ones
	// may wait long for a slot while long jobs run.
	order := tenantsInTurn(admitted)
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
		l.levels.wake(workCtx, called)
	}
	for i, it := range order {
		l.start(ctx, workCtx, flights[i], it.job)
	}
	return deferBatch{deferrals: deferrals, unreserve: unreserve, credits: g.credits}
}

// start runs the handler of an admitted job, its flight f already in
// flight, in its own goroutine once one of the Concurrency slots is free,
// holding the slot until the job is settled (stages 7 to 10). If the
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
			defer l.caps.finishLeases(workCtx, f, job.Tenant) // 10.
		}
		if l.stoppedSince(workCtx, f, job) {
			return
		}
		l.runs.run(workCtx, f, job) // 9.
	}()
}

// stoppedSince defers job, admitted, if its tenant was paused or held
// since (stages 7 and 8), and reports whether it did. Its deferrals stay
// in its own frame, not the handler goroutine's: that goroutine starts on
// a small stack, and the handler and the ack must not have to grow it.
func (l *lifecycle) stoppedSince(workCtx context.Context, f *flight, job Job) bool {
	if d, paused := l.pauses.pausedNow(job); paused {
		// 7. Admitted before an operator paused its tenant.
		l.defers.waitOutPause(workCtx, f, job, d)
		return true
	}
	if until, held := l.holds.after(job.Tenant, l.cfg.Now()); held {
		// 8. Admitted before its downstream asked to wait.
		l.rec.add(job.Tenant, func(s *TenantStats) { s.HeldBack++ })
		l.defers.waitOutHold(workCtx, f, job, until)
		return true
	}
	return false
}

// duplicate acks, unrun, a job another incarnation of which ran (owner).
func (l *lifecycle) duplicate(it *item, owner int64) {
	l.log.Warn("duplicate of a moved job; acking it without running", "tenant", it.job.Tenant, "job", it.job.ID,
		"incarnation", incarnation(it.job), "moves", it.job.Deferrals, "owner", owner)
	l.rec.add(it.job.Tenant, func(s *TenantStats) { s.Duplicates++ })
	l.settle(it.msg, func(m jetstream.Msg) error { return m.Ack() })
}

// redisFailed applies the Redis error policy to a job Redis failed to
// decide (err) while the worker runs: it reports true to admit it
// (AllowOnRedisError), else puts it off by wait, which decide set.
func (l *lifecycle) redisFailed(it *item, err error, wait time.Duration) (admit bool) {
	l.rec.add(it.job.Tenant, func(s *TenantStats) { s.RedisErrors++ })
	if l.cfg.OnRedisError == AllowOnRedisError {
		l.log.Debug("redis failed; admitting job by policy", "tenant", it.job.Tenant, "job", it.job.ID, "err", err)
		l.rec.add(it.job.Tenant, func(s *TenantStats) { s.AllowedOnRedisError++ })
		return true
	}
	l.log.Debug("redis failed; deferring job", "tenant", it.job.Tenant, "job", it.job.ID, "retry_in", wait, "err", err)
	l.settle(it.msg, func(m jetstream.Msg) error { return m.NakWithDelay(wait) })
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

// settle settles msg with f. A failure is logged: the message stays pending
// and JetStream redelivers it after AckWait.
func (l *lifecycle) settle(msg jetstream.Msg, f func(jetstream.Msg) error) {
	if err := f(msg); err != nil {
		l.log.Warn("settling a message failed; JetStream redelivers it after AckWait", "subject", msg.Subject(), "err", err)
	}
}

// waitReason says what held a limited job, for HeaderWaitReason.
func waitReason(d throttle.Decision) string {
	if d.LevelName != "" {
		return "shared limit " + d.LevelName
	}
	if d.Binding == (throttle.Limit{}) {
		return "the slot it holds"
	}
	return "limit " + d.Binding.String()
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

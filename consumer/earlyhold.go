package consumer

import (
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/fastlane/fastcopy"
	"github.com/throttler/throttler/throttle"
)

// ScheduleLead is how long before its slot the worker schedules a moved
// job's copy to fire (ScheduleDeferrer.Lead): more than the server's
// schedule pass (250 ms) and the wait behind the stream's backlog that
// delays a fired copy (up to 0.7 s measured on two busy cores), so that
// copies come back before their slots and the worker starts each on its
// slot (earlyHold) instead of late and bunched.
const ScheduleLead = 750 * time.Millisecond

// earlyHoldMax is the furthest before its slot a moved copy that comes
// back is held by the worker; one that comes back earlier (a copy whose
// stay was capped by the stream's max age) is decided and deferred again.
const earlyHoldMax = 2 * ScheduleLead

// shortWaitCap is how many jobs the worker keeps for their slot at once
// (Config.ShortWait): as many as it may NAK (FairDeferrer.MaxNaked), since
// each holds a MaxAckPending slot the same way.
const shortWaitCap = NakedPerWorker

// earlyHold keeps the moved copies that come back before their slot until
// the slot, then hands them to the deciding loop (Due, Ready), which
// decides them then: admitted through the slot they hold, without a second
// charge and without a third delivery. Deciding them at once instead would
// defer them again for the rest of the wait (a NAK: one more delivery
// each). While held, a copy stays in Worker.held, which keeps it alive.
type earlyHold struct {
	now func() time.Time
	// due has a value when ready holds copies whose slot has come.
	due chan struct{}

	mu      sync.Mutex
	stopped bool
	timers  map[jetstream.Msg]*time.Timer
	short   int // jobs held by holdUntilSlot
	// again holds the messages held since they were last decided: decided
	// again, they are not fresh (they hold the slot they were given).
	again   map[jetstream.Msg]struct{}
	ready   []jetstream.Msg
	waiting sync.WaitGroup // one per copy held and not yet ready or stopped
}

// newEarlyHold returns an empty hold reading the time with now.
func newEarlyHold(now func() time.Time) *earlyHold {
	return &earlyHold{now: now, due: make(chan struct{}, 1), timers: map[jetstream.Msg]*time.Timer{}, again: map[jetstream.Msg]struct{}{}}
}

// slotOf reads the slot of a moved copy from its header; false for other
// messages (originals, the fast lane's copies, woken jobs).
func slotOf(m jetstream.Msg) (time.Time, bool) {
	h := m.Headers()
	if h == nil || h.Get(fastcopy.Header) != "" || h.Get(HeaderWoken) != "" {
		return time.Time{}, false
	}
	us, err := strconv.ParseInt(h.Get(HeaderSlot), 10, 64)
	if err != nil || us <= 0 {
		return time.Time{}, false
	}
	return time.UnixMicro(us), true
}

// take returns the messages of group to decide now, and holds the moved
// copies that came back before their slot (by at most earlyHoldMax) until
// then.
func (e *earlyHold) take(group []jetstream.Msg) []jetstream.Msg {
	now := e.now()
	out := group[:0:0]
	for _, m := range group {
		slot, ok := slotOf(m)
		if wait := slot.Sub(now); !ok || wait <= 0 || wait > earlyHoldMax || !e.hold(m, wait) {
			out = append(out, m)
		}
	}
	return out
}

// hold starts the wait of m; false once the hold has stopped.
func (e *earlyHold) hold(m jetstream.Msg, wait time.Duration) bool {
	return e.holdAs(m, wait, false)
}

// holdAs starts the wait of m, counted among the short waits (of at most
// shortWaitCap) when short; false once the hold has stopped or is full.
func (e *earlyHold) holdAs(m jetstream.Msg, wait time.Duration, short bool) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped || (short && e.short >= shortWaitCap) {
		return false
	}
	if short {
		e.short++
	}
	e.again[m] = struct{}{}
	e.waiting.Add(1)
	e.timers[m] = time.AfterFunc(wait, func() {
		e.mu.Lock()
		if short {
			e.short--
		}
		delete(e.timers, m)
		e.ready = append(e.ready, m)
		e.mu.Unlock()
		select {
		case e.due <- struct{}{}:
		default: // already told
		}
		e.waiting.Done()
	})
	return true
}

// decidedAgain reports whether m was held since it was last decided, and
// forgets it: a job given a slot and held for it is not fresh when decided
// again, or it would be charged a second time.
func (e *earlyHold) decidedAgain(m jetstream.Msg) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.again[m]
	delete(e.again, m)
	return ok
}

// Ready returns the copies whose slot has come, taking them out of the
// hold.
func (e *earlyHold) Ready() []jetstream.Msg {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.ready
	e.ready = nil
	return r
}

// stop ends the hold and returns every copy it still held, whose slot
// has come or not: the caller hands them back.
func (e *earlyHold) stop() []jetstream.Msg {
	e.mu.Lock()
	e.stopped = true
	var left []jetstream.Msg
	for m, t := range e.timers {
		if t.Stop() { // else its callback is making it ready
			left = append(left, m)
			delete(e.timers, m)
			e.waiting.Done()
		}
	}
	e.mu.Unlock()
	e.waiting.Wait()
	left = append(left, e.Ready()...)
	e.mu.Lock()
	clear(e.again)
	e.mu.Unlock()
	return left
}

// holdUntilSlot keeps a job given a slot close at hand (Reserved, within
// Config.ShortWait) in the worker until the slot, when it is decided again and
// admitted through it, instead of deferring it: NATS would bring it back
// late (a NAK past 1,024 pending messages, or a move behind the stream's
// backlog), and late jobs run together with those on time. It keeps at
// most shortWaitCap so at once; it reports whether it kept the job.
func (dp *dispatcher) holdUntilSlot(it *item, d throttle.Decision) bool {
	if d.Outcome != throttle.Reserved || d.Wait <= 0 || d.Wait > dp.cfg.ShortWait {
		return false
	}
	dp.hand.pulled.add(it.msg, dp.cfg.Now()) // kept alive while it waits
	if !dp.early.holdAs(it.msg, d.Wait, true) {
		dp.hand.pulled.remove(it.msg)
		return false // full, or the worker is stopping: deferred as usual
	}
	return true
}

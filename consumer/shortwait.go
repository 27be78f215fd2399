package consumer

import (
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/fastlane/fastcopy"
	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/throttle"
)

// ScheduleLead is how long before its slot the worker schedules a moved
// job's copy to fire (ScheduleDeferrer.Lead): more than the server's
// schedule pass (250 ms) and the wait behind the stream's backlog that
// delays a fired copy (up to 0.7 s measured on two busy cores), so that
// copies come back before their slots and the worker starts each on its
// slot (shortWait) instead of late and bunched.
const ScheduleLead = 750 * time.Millisecond

// shortWaitMax is the furthest before its slot a moved copy that comes
// back is kept by the worker; one that comes back earlier (a copy whose
// stay was capped by the stream's max age) is decided and deferred again.
const shortWaitMax = 2 * ScheduleLead

// shortWaitCap is how many jobs given a slot close at hand the worker
// keeps for their slot at once (Config.ShortWait): as many as it may NAK
// (FairDeferrer.MaxNaked), since each takes a MaxAckPending place the same
// way.
const shortWaitCap = NakedPerWorker

// shortWait is the short wait: it keeps in the worker the moved copies that
// come back before their slot, and the jobs given a slot close at hand
// (take), until the slot, then hands them to the deciding loop
// (due, Ready), which decides them then: admitted through their
// reservation, without a second charge and without a third delivery.
// Deciding them at once instead would defer them again for the rest of the
// wait (a NAK: one more delivery each). While it waits, a job stays among
// the pulled messages, which keeps it alive.
type shortWait struct {
	now    func() time.Time
	within time.Duration // Config.ShortWait: the furthest slot take keeps a job for
	pulled *pulledMsgs   // the worker's pulled messages, which a kept job joins
	rec    *recorder
	obs    Observer
	// due has a value when ready holds jobs whose slot has come.
	due chan struct{}

	mu       sync.Mutex
	stopped  bool
	timers   map[jetstream.Msg]*time.Timer
	reserved int // jobs kept by take
	// again holds the messages kept since they were last decided: decided
	// again, they are not fresh (they hold their reservation).
	again map[jetstream.Msg]struct{}
	// read holds the jobs kept for their slot once decided
	// (take): read again, they are no new delivery.
	read    map[jetstream.Msg]struct{}
	ready   []jetstream.Msg
	waiting sync.WaitGroup // one per job kept and not yet ready or stopped
}

// newShortWait returns an empty short wait reading the time with cfg.Now,
// whose kept jobs join pulled.
func newShortWait(cfg Config, pulled *pulledMsgs, rec *recorder, obs Observer) *shortWait {
	return &shortWait{now: cfg.Now, within: cfg.ShortWait, pulled: pulled, rec: rec, obs: obs, due: make(chan struct{}, 1),
		timers: map[jetstream.Msg]*time.Timer{}, again: map[jetstream.Msg]struct{}{},
		read: map[jetstream.Msg]struct{}{}}
}

// slotOf reads the slot of a moved copy from its header; false for other
// messages (originals, the fast lane's copies, woken jobs).
func slotOf(m jetstream.Msg) (time.Time, bool) {
	h := m.Headers()
	if h == nil || h.Get(fastcopy.Header) != "" || h.Get(header.Woken) != "" {
		return time.Time{}, false
	}
	us, err := strconv.ParseInt(h.Get(header.Slot), 10, 64)
	if err != nil || us <= 0 {
		return time.Time{}, false
	}
	return time.UnixMicro(us), true
}

// keepEarly keeps m until its slot when it is a moved copy that came
// back before it (by at most shortWaitMax), and reports whether it did.
func (e *shortWait) keepEarly(m jetstream.Msg) bool {
	slot, ok := slotOf(m)
	if !ok {
		return false
	}
	wait := slot.Sub(e.now())
	return wait > 0 && wait <= shortWaitMax && e.keep(m, wait)
}

// keep starts the wait of m; false once the short wait has stopped.
func (e *shortWait) keep(m jetstream.Msg, wait time.Duration) bool {
	return e.keepAs(m, wait, false)
}

// keepAs starts the wait of m, counted among the reserved jobs kept (at
// most shortWaitCap) when reserved; false once the short wait has stopped
// or is full.
func (e *shortWait) keepAs(m jetstream.Msg, wait time.Duration, reserved bool) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped || (reserved && e.reserved >= shortWaitCap) {
		return false
	}
	if reserved {
		e.reserved++
		e.read[m] = struct{}{}
	}
	e.again[m] = struct{}{}
	e.waiting.Add(1)
	e.timers[m] = time.AfterFunc(wait, func() {
		e.mu.Lock()
		if reserved {
			e.reserved--
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

// readBefore reports whether m was read and decided before it was kept
// for its slot, and forgets it: read again, it is no new delivery, and
// counts as none (TenantStats.Delivered).
func (e *shortWait) readBefore(m jetstream.Msg) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.read[m]
	delete(e.read, m)
	return ok
}

// decidedAgain reports whether m was kept since it was last decided, and
// forgets it: a job given a slot and kept for it is not fresh when decided
// again, or it would be charged a second time.
func (e *shortWait) decidedAgain(m jetstream.Msg) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.again[m]
	delete(e.again, m)
	return ok
}

// Ready returns the jobs whose slot has come, taking them out of the
// short wait.
func (e *shortWait) Ready() []jetstream.Msg {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.ready
	e.ready = nil
	return r
}

// stop ends the short wait and returns every job it still kept, whose
// slot has come or not: the caller hands them back.
func (e *shortWait) stop() []jetstream.Msg {
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
	clear(e.read)
	e.mu.Unlock()
	return left
}

// take keeps a job given a slot close at hand (Reserved, within
// Config.ShortWait) in the worker until the slot, when it is decided again
// and admitted through its reservation, instead of deferring it: NATS would
// bring it back late (a NAK past 1,024 pending messages, or a move behind
// the stream's backlog), and late jobs run together with those on time. It
// keeps at most shortWaitCap so at once; a job it does not keep is
// deferred as usual (deferSettler.take).
func (e *shortWait) take(_ *groupActs, it *item, res throttle.Result) bool {
	if res.Wait <= 0 || res.Wait > e.within {
		return false
	}
	e.pulled.add(it.msg, e.now()) // kept alive while it waits
	if !e.keepAs(it.msg, res.Wait, true) {
		e.pulled.remove(it.msg)
		return false // full, or the worker is stopping
	}
	e.rec.add(it.job.Tenant, func(s *TenantStats) { s.Deferred++ })
	e.obs.ObserveThrottleWait(res.Wait)
	return true
}

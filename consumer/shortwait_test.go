package consumer

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/throttle"
)

// TestMoveWithLeadFiresBeforeTheSlot: with a Lead, a moved job's copy is
// scheduled to fire that long before its slot (and a job that waits less
// than the lead, at once), while it still carries the slot itself.
func TestMoveWithLeadFiresBeforeTheSlot(t *testing.T) {
	now := time.Date(2026, 3, 4, 5, 6, 17, 0, time.UTC)
	for _, tt := range []struct {
		wait time.Duration
		at   string
	}{
		{3 * time.Second, "@at 2026-03-04T05:06:19.251Z"},
		{500 * time.Millisecond, "@at 2026-03-04T05:06:17Z"},
	} {
		e := moveEnv(t, now)
		e.params.Deferrer = ScheduleDeferrer{JetStream: e.js, Subjects: "sched", Now: (&fakeClock{now: now}).Now, Lead: 750 * time.Millisecond}
		e.decider.decide = func(context.Context, throttle.Copy) throttle.Result { return result(throttle.Reserved, tt.wait) }
		e.start()
		m := newMsg(1, "jobs.acme")
		e.push(m)
		e.waitSettled(m)
		e.stop()
		copies := e.js.copies()
		if len(copies) != 1 {
			t.Fatalf("wait %s: %d copies, want 1", tt.wait, len(copies))
		}
		h := copies[0].Header
		if got := h.Get(jetstream.ScheduleHeader); got != tt.at {
			t.Errorf("wait %s: schedule %q, want %q", tt.wait, got, tt.at)
		}
		if got, want := h.Get(header.Slot), strconv.FormatInt(now.Add(tt.wait).UnixMicro(), 10); got != want {
			t.Errorf("wait %s: slot %s, want %s", tt.wait, got, want)
		}
	}
}

// TestCopyBackBeforeItsSlotWaitsForIt: a moved job's copy delivered
// 300 ms before its slot is decided once, at its slot, and runs: it is
// not deferred again for the rest of its wait (a third delivery). One
// delivered 5 s early (a stay capped by the stream's max age) is decided
// at once, and deferred again.
func TestCopyBackBeforeItsSlotWaitsForIt(t *testing.T) {
	e := setup(t)
	var mu sync.Mutex
	decidedAt := map[string]time.Time{}
	slots := map[string]time.Time{}
	e.decider.decide = func(_ context.Context, c throttle.Copy) throttle.Result {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		decidedAt[c.JobID] = now
		if wait := slots[c.JobID].Sub(now); wait > 0 {
			return result(throttle.Reserved, wait)
		}
		return result(throttle.Admitted, 0)
	}
	copyOf := func(seq uint64, id string, slot time.Time) *fakeMsg {
		mu.Lock()
		slots[id] = slot
		mu.Unlock()
		return newMsg(seq, "jobs.acme", header.JobID, id, header.Deferrals, "1",
			header.Slot, strconv.FormatInt(slot.UnixMicro(), 10))
	}
	e.start()
	pushed := time.Now()
	soon := copyOf(10, "JOBS:1", pushed.Add(300*time.Millisecond))
	far := copyOf(11, "JOBS:2", pushed.Add(5*time.Second))
	e.push(soon, far)
	e.waitSettled(soon, far)
	e.stop()

	wantSettled(t, soon, ack)
	mu.Lock()
	defer mu.Unlock()
	if at := decidedAt["JOBS:1"]; at.Before(slots["JOBS:1"]) {
		t.Errorf("the copy due in 300 ms was decided %s before its slot", slots["JOBS:1"].Sub(at))
	}
	if got := e.ran.ids(); len(got) != 1 || got[0] != "JOBS:1" {
		t.Errorf("ran %v, want JOBS:1 alone", got)
	}
	if s := far.settled(); len(s) != 1 || s[0].kind != "nakDelay" {
		t.Errorf("the copy 5 s early settled %v, want deferred again (a NAK)", s)
	}
}

// TestShortWaitIsKeptInTheWorker: a job given a slot 200 ms away is kept
// by the worker and decided again at the slot, as the holder of that slot,
// where it runs: no NAK, one delivery.
func TestShortWaitIsKeptInTheWorker(t *testing.T) {
	e := setup(t)
	e.params.Config.ShortWait = ScheduleLead
	var mu sync.Mutex
	var slot time.Time
	calls := 0
	e.decider.decide = func(context.Context, throttle.Copy) throttle.Result {
		mu.Lock()
		defer mu.Unlock()
		calls++
		now := time.Now()
		if slot.IsZero() {
			slot = now.Add(200 * time.Millisecond)
		}
		if wait := slot.Sub(now); wait > 0 {
			return result(throttle.Reserved, wait)
		}
		return result(throttle.Admitted, 0)
	}
	e.start()
	m := newMsg(1, "jobs.acme")
	e.push(m)
	e.waitSettled(m)
	e.stop()

	wantSettled(t, m, ack)
	mu.Lock()
	defer mu.Unlock()
	if calls != 2 {
		t.Errorf("decided %d times, want 2: at once and at its slot", calls)
	}
	// Decided again, it is not fresh: it holds the slot it was given, and
	// must not be charged for another.
	if asked := e.decider.asked(); len(asked) != 2 || !asked[0].Fresh || asked[1].Fresh {
		t.Errorf("decided as %+v, want fresh then not", asked)
	}
	if got := e.ran.ids(); len(got) != 1 {
		t.Errorf("ran %v, want the job", got)
	}
	// Decided twice, delivered once.
	if s := e.stats("acme"); s.Delivered != 1 {
		t.Errorf("%d deliveries counted, want 1: a job kept for its slot is no new delivery", s.Delivered)
	}
}

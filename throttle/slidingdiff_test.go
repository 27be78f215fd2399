package throttle_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// slidingLog is the reference sliding window log: every cost unit
// admitted is one entry at its slot, kept forever, and a job's earliest
// slot is found by scanning them.
type slidingLog struct {
	w  throttle.Limit
	at []time.Time // sorted
}

// earliest is the first instant at or after now, and after every entry
// (in order), when c more units keep every span of the window within N.
func (m *slidingLog) earliest(now time.Time, c int64) time.Time {
	s := now
	if n := len(m.at); n > 0 && m.at[n-1].After(s) {
		s = m.at[n-1]
	}
	// At s, the entries after s - D number at most N - c: the (N - c + 1)th
	// last must have left the span.
	if k := len(m.at) - int(m.w.Rate-c+1); k >= 0 {
		if t := m.at[k].Add(m.w.Period); t.After(s) {
			s = t
		}
	}
	return s
}

// inSpan counts the units that count at now: those admitted after
// now - D, reserved ahead included.
func (m *slidingLog) inSpan(now time.Time) int64 {
	var n int64
	for _, t := range m.at {
		if t.After(now.Add(-m.w.Period)) {
			n++
		}
	}
	return n
}

// add records c entries at s.
func (m *slidingLog) add(s time.Time, c int64) {
	for range c {
		m.at = append(m.at, s)
	}
}

// slidingModel decides jobs under several windows as the engine should.
type slidingModel struct {
	logs    []*slidingLog
	horizon time.Duration
	slots   map[string]time.Time // reserved, by job id
}

// remaining is the units the tightest window has left at now.
func (m *slidingModel) remaining(now time.Time) int64 {
	r := int64(-1)
	for _, lg := range m.logs {
		if left := max(0, lg.w.Rate-lg.inSpan(now)); r < 0 || left < r {
			r = left
		}
	}
	return r
}

// decide returns the outcome, wait and remaining units of a job of cost c
// at now. Remaining is 0 for a job that holds a slot, or came back for it.
func (m *slidingModel) decide(id string, c int64, now time.Time) (throttle.Outcome, time.Duration, int64) {
	if slot, ok := m.slots[id]; ok {
		if !now.Before(slot) {
			delete(m.slots, id)
			return throttle.Admitted, 0, 0
		}
		return throttle.Reserved, slot.Sub(now), 0
	}
	s := now
	for _, lg := range m.logs {
		if e := lg.earliest(now, c); e.After(s) {
			s = e
		}
	}
	wait := s.Sub(now)
	switch {
	case wait == 0:
	case id != "" && wait <= m.horizon:
		m.slots[id] = s
	case id != "":
		return throttle.Limited, m.horizon, m.remaining(now)
	default:
		return throttle.Limited, wait, m.remaining(now)
	}
	for _, lg := range m.logs {
		lg.add(s, c)
	}
	if wait == 0 {
		return throttle.Admitted, 0, m.remaining(now)
	}
	return throttle.Reserved, wait, 0
}

// The engine's sliding windows decide exactly as the reference log, at
// fixed times (outcome, wait and units left), with random costs, arrivals
// (many in one microsecond, idle spans), jobs with and without ids, jobs
// back for their slots, one by one and in batches.
func TestSlidingMatchesTheLog(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	for round, ws := range []throttle.Limits{
		{throttle.SlidingWindow(5, time.Second)},
		{throttle.SlidingWindow(7, 300*ms), throttle.SlidingWindow(20, 2*time.Second)},
		{throttle.SlidingWindow(1, 50*ms)},
		{throttle.SlidingWindow(60, time.Second), throttle.SlidingWindow(200, 5*time.Second)},
	} {
		rng := rand.New(rand.NewPCG(uint64(round), 27))
		horizon := 3 * time.Second
		l := newLimiter(t, e.rdb, fmt.Sprint(e.prefix, round), horizon, ws)
		m := &slidingModel{horizon: horizon, slots: map[string]time.Time{}}
		for _, w := range ws {
			m.logs = append(m.logs, &slidingLog{w: w})
		}
		now := t0
		var waiting []string // ids holding slots
		mismatches, decided := 0, 0
		outcomes := map[throttle.Outcome]int{}
		for step := range 400 {
			switch rng.IntN(10) {
			case 0, 1, 2: // the same microsecond
			case 3, 4:
				now = now.Add(time.Microsecond)
			case 5: // idle: every admission leaves the first span
				now = now.Add(ws[0].Period + time.Duration(rng.Int64N(int64(ws[0].Period))).Truncate(time.Microsecond))
			default:
				now = now.Add(time.Duration(rng.Int64N(int64(ws[0].Period / 3))).Truncate(time.Microsecond))
			}
			var reqs []throttle.Request
			for k := range 1 + rng.IntN(6) {
				req := throttle.Request{Tenant: "acme", At: now, Cost: 1 + rng.Int64N(min(ws.MinBurst(), 3))}
				switch {
				case len(waiting) > 0 && rng.IntN(3) == 0:
					i := rng.IntN(len(waiting))
					req.JobID, req.Cost = waiting[i], 1
					waiting = slices.Delete(waiting, i, i+1)
				case rng.IntN(2) == 0:
					req.JobID = fmt.Sprintf("j%d-%d", step, k)
				}
				reqs = append(reqs, req)
			}
			var got []throttle.Result
			if rng.IntN(2) == 0 {
				got = l.DecideBatch(ctx, reqs)
			} else {
				for _, req := range reqs {
					d, err := l.Decide(ctx, req)
					got = append(got, throttle.Result{Decision: d, Err: err})
				}
			}
			for i, req := range reqs {
				o, wait, left := m.decide(req.JobID, req.Cost, req.At)
				decided++
				outcomes[o]++
				if got[i].Err != nil {
					t.Fatalf("round %d step %d job %+v: %v", round, step, req, got[i].Err)
				}
				if d := got[i].Decision; d.Outcome != o || d.Wait != wait || d.Remaining != left {
					mismatches++
					t.Errorf("round %d step %d job %+v: engine %v for %s (%d left), log %v for %s (%d left)",
						round, step, req, d.Outcome, d.Wait, d.Remaining, o, wait, left)
				}
				if o == throttle.Reserved {
					waiting = append(waiting, req.JobID)
				}
			}
			if mismatches > 5 {
				t.Fatalf("round %d: stopped at %d mismatches", round, mismatches)
			}
		}
		t.Logf("round %d (%s): %d jobs decided %v, %d mismatches", round, ws, decided, outcomes, mismatches)
	}
}

// Admissions in the same microsecond from several clients at once are
// each an entry of their own: exactly N of many are admitted.
func TestSlidingSameMicrosecond(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	const n, workers, each = 1000, 8, 200
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range workers {
		l := newLimiter(t, e.srv.Client(t), e.prefix, time.Minute, throttle.Limits{throttle.SlidingWindow(n, time.Minute)})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				d, err := l.Decide(ctx, throttle.Request{Tenant: "acme", At: t0, JobID: fmt.Sprint(g, "-", i)})
				if err != nil {
					t.Errorf("worker %d job %d: %v", g, i, err)
					return
				}
				if d.Outcome == throttle.Admitted {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := admitted.Load(); got != n {
		t.Fatalf("%d admitted in one microsecond, want exactly N = %d", got, n)
	}
	// One member per admission and per slot reserved (all within the
	// horizon), each its own.
	card := e.rdb.ZCard(ctx, e.prefix+":{acme}:z:60000000").Val()
	if card != workers*each {
		t.Fatalf("the window holds %d members, want %d: one per job", card, workers*each)
	}
}

// Two limiters deciding in turn on one Redis never admit more than N in
// any span of the window, measured at every admission. Each call takes
// its time and decides under one lock: the engine's now (Redis TIME in
// production) never goes back, which two goroutines taking times before
// racing to Redis would not guarantee.
func TestSlidingBoundWithTwoDeciders(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	w := throttle.SlidingWindow(10, 100*ms)
	var clock atomic.Int64 // µs after t0, moved under turn
	began := time.Now()
	var mu, turn sync.Mutex
	var admitted []time.Time
	var wg sync.WaitGroup
	for g := range 2 {
		l := newLimiter(t, e.srv.Client(t), e.prefix, time.Second, throttle.Limits{w})
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 2))
			for range 600 {
				turn.Lock()
				// The clock never runs slower than the real one: the
				// window's key expires by Redis's clock once its last
				// admission left the span, so a clock that crawled through
				// a stall of a loaded machine (over the span: seen in CI)
				// found the window emptied, as a replay slower than real
				// time would (Request.At).
				c := clock.Add(rng.Int64N(600))
				if real := time.Since(began).Microseconds(); c < real {
					clock.Store(real)
					c = real
				}
				at := t0.Add(time.Duration(c) * time.Microsecond)
				d, err := l.Decide(ctx, throttle.Request{Tenant: "acme", At: at})
				turn.Unlock()
				if err != nil {
					t.Errorf("decider %d: %v", g, err)
					return
				}
				if d.Outcome == throttle.Admitted {
					mu.Lock()
					admitted = append(admitted, at)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	slices.SortFunc(admitted, func(a, b time.Time) int { return a.Compare(b) })
	if len(admitted) <= 2*int(w.Rate) {
		t.Fatalf("only %d admitted: the test did not fill the window", len(admitted))
	}
	for i, at := range admitted {
		n := 0
		for _, b := range admitted[:i+1] {
			if b.After(at.Add(-w.Period)) {
				n++
			}
		}
		if n > int(w.Rate) {
			t.Fatalf("%d admitted in the span of %s ending at admission %d (%s), at most %d allowed", n, w.Period, i, at.Sub(t0), w.Rate)
		}
	}
	t.Logf("%d admitted, never more than %d in %s", len(admitted), w.Rate, w.Period)
}

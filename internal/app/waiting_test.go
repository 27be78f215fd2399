package app

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

// waitingEnv is two workers' waitingCounters over one real Redis, on a
// clock of the test's.
type waitingEnv struct {
	a, b  *waitingCounter
	clock *testClock
	rdb   *redis.Client
}

// newWaitingEnv returns counters a and b of one fleet: each holds inHand
// jobs, the consumer's ack-pending is ack, the schedules hold copies
// moved jobs (nil: jobs are never moved), acme's cap has parked jobs
// waiting in its list, noted by a, and the global level queued jobs
// waiting for their turn, noted by b.
func newWaitingEnv(t *testing.T, ack, copies, parked, queued int, moved bool) *waitingEnv {
	t.Helper()
	rdb := testenv.StartRedis(t).Client(t)
	lim, err := throttle.New(rdb, throttle.Options{Policies: throttle.Rules{Default: throttle.Policy{Running: 1}}, Prefix: "w"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range parked {
		// acme's waiting list (throttle's keyspace: <prefix>:{acme}:w).
		if err := rdb.ZAdd(context.Background(), "w:{acme}:w", redis.Z{Score: float64(i), Member: fmt.Sprintf("j%d", i)}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range queued {
		// The global level's list (<prefix>:{~.global}:lw).
		if err := rdb.ZAdd(context.Background(), "w:{~.global}:lw", redis.Z{Score: float64(i), Member: fmt.Sprintf("1/acme/q%d", i)}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	e := &waitingEnv{clock: &testClock{t: time.Now()}, rdb: rdb}
	counter := func(id string, inHand int, parkedUnder, queuedUnder []string) *waitingCounter {
		c := &waitingCounter{census: lim.Census(), id: id, every: 10 * time.Second, now: e.clock.now, log: slog.New(slog.DiscardHandler),
			inHand: func() int { return inHand }, parkedUnder: func(time.Time) []string { return parkedUnder },
			queuedUnder: func(time.Time) []string { return queuedUnder }, ackPending: func() int { return ack }}
		if moved {
			c.copies = func(context.Context) (int, error) { return copies, nil }
		}
		return c
	}
	e.a, e.b = counter("a", 5, []string{"acme"}, nil), counter("b", 3, nil, []string{"_global"})
	return e
}

// TestWaitingCounterCounts: one worker counts for the fleet, and both
// serve its counts: NAK'd jobs are the ack-pending less the jobs in the
// workers' hands, scheduled ones the moved copies less the parked ones
// (parked jobs are moved copies too), or, when nothing is moved, the
// parked ones are NAK'd and come out of the NAK'd count; jobs queued
// under a shared level likewise.
func TestWaitingCounterCounts(t *testing.T) {
	for _, tc := range []struct {
		name         string
		moved, holds bool
		want         map[string]int64
	}{
		{"moved", true, false, map[string]int64{waitingNak: 20 - 8, waitingScheduled: 50 - 7 - 3, waitingParked: 7,
			waitingQueued: 3, waitingPaused: 0, waitingHeld: 0}},
		{"nak only", false, false, map[string]int64{waitingNak: 20 - 8 - 7 - 3, waitingScheduled: 0, waitingParked: 7,
			waitingQueued: 3, waitingPaused: 0, waitingHeld: 0}},
		// zeta is paused and held: its jobs count as paused, once.
		{"paused and held", true, true, map[string]int64{waitingNak: 20 - 8, waitingScheduled: 50 - 7 - 3 - 6 - 4,
			waitingParked: 7, waitingQueued: 3, waitingPaused: 6, waitingHeld: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newWaitingEnv(t, 20, 50, 7, 3, tc.moved)
			if tc.holds {
				moved := map[string]int{"zeta": 6, "globex": 4, "initech": 0}
				for _, c := range []*waitingCounter{e.a, e.b} {
					c.copiesOf = func(_ context.Context, t string) (int, error) { return moved[t], nil }
					c.paused = func(time.Time) []string { return []string{"zeta"} }
					c.held = func(time.Time) []string { return []string{"globex", "zeta", "initech"} }
				}
			}
			ctx := context.Background()
			e.b.tick(ctx) // b reports its hands and takes the counter before a noted acme
			e.a.tick(ctx) // a reports and notes acme
			e.b.tick(ctx) // b counts with both reports
			e.a.tick(ctx) // a reads b's counts
			for _, c := range []*waitingCounter{e.a, e.b} {
				got, ok := c.waiting()
				if !ok {
					t.Fatalf("worker %s serves no counts", c.id)
				}
				for k, v := range tc.want {
					// Every kind is served, 0 included.
					if n, ok := got[k]; !ok || n != v {
						t.Errorf("worker %s: %s = %d, want %d (all: %v)", c.id, k, got[k], v, got)
					}
				}
			}
		})
	}
}

// TestWaitingCounterClearsAKindGone: a kind counted once and then with
// nothing waiting (a tenant resumed) reads 0, not its last count.
func TestWaitingCounterClearsAKindGone(t *testing.T) {
	e := newWaitingEnv(t, 20, 50, 0, 0, true)
	paused := []string{"zeta"}
	e.a.copiesOf = func(context.Context, string) (int, error) { return 7, nil }
	e.a.paused = func(time.Time) []string { return paused }
	ctx := context.Background()
	e.a.tick(ctx)
	if got, _ := e.a.waiting(); got[waitingPaused] != 7 {
		t.Fatalf("paused %d, want 7 (all: %v)", got[waitingPaused], got)
	}
	paused = nil
	e.clock.advance(e.a.every)
	e.a.tick(ctx)
	if got, _ := e.a.waiting(); got[waitingPaused] != 0 {
		t.Fatalf("after the resume: paused %d, want 0 (all: %v)", got[waitingPaused], got)
	}
}

// TestWaitingCounterStale: counts older than three intervals (the counter
// gone) are not served.
func TestWaitingCounterStale(t *testing.T) {
	e := newWaitingEnv(t, 20, 50, 0, 0, true)
	e.a.tick(context.Background())
	if _, ok := e.a.waiting(); !ok {
		t.Fatal("no counts served after a count")
	}
	e.clock.advance(3*e.a.every + time.Second)
	if got, ok := e.a.waiting(); ok {
		t.Errorf("counts %v served %s after they were counted", got, 3*e.a.every+time.Second)
	}
}

// TestWaitingCounterPacesSlowCounts: the counter counts every tick while a
// count is cheap, and no more than a twentieth of the time once counts
// take long (a stream listing many moved jobs), at least every
// censusSlowest.
func TestWaitingCounterPacesSlowCounts(t *testing.T) {
	at := time.Now()
	for _, tc := range []struct {
		took  time.Duration
		after time.Duration
		due   bool
	}{
		{took: 0, after: time.Second, due: true},
		{took: 50 * time.Millisecond, after: time.Second, due: true},
		{took: 200 * time.Millisecond, after: time.Second, due: false},
		{took: 200 * time.Millisecond, after: 4 * time.Second, due: true},
		{took: 2 * time.Second, after: 9 * time.Second, due: false},
		{took: 2 * time.Second, after: censusSlowest, due: true},
	} {
		c := &waitingCounter{every: time.Second, counted: at, took: tc.took}
		if got := c.due(at.Add(tc.after)); got != tc.due {
			t.Errorf("a count that took %s, %s later: due %v, want %v", tc.took, tc.after, got, tc.due)
		}
	}
	if !(&waitingCounter{every: time.Second}).due(at) {
		t.Errorf("the first count is not due")
	}
}

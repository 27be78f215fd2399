package consumer

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// testLane returns a lane with a backlog threshold of 100 and a tenant
// share of 2, its jobs consumer last seen at stream sequence 1000 with
// pending jobs left to deliver.
func testLane(pending uint64) *lane {
	w := &Worker{cfg: Config{}.withDefaults(), log: slog.New(slog.DiscardHandler)}
	l := &lane{FastLane: FastLane{Backlog: 100, TenantShare: 2, JobSubjects: []string{"jobs.>"}}, w: w,
		work: make(chan arrival, 16), wake: make(chan struct{}, 1), slow: map[string]uint64{}, taken: map[string][]uint64{}}
	l.observe(1000, pending)
	return l
}

// TestLaneTakesOnlyTenantsWithNothingQueued: the lane takes a job only
// while the jobs consumer has a backlog, only for a tenant with no job
// queued in it, and at most TenantShare of one tenant's jobs until the
// consumer passes them.
func TestLaneTakesOnlyTenantsWithNothingQueued(t *testing.T) {
	t.Run("position unknown", func(t *testing.T) {
		l := testLane(5000)
		l.pos, l.pending = 0, 0 // nothing delivered yet
		if l.admit("b", 10) {
			t.Fatal("took a job before knowing the consumer's position")
		}
		l.observe(5, 5000)
		if !l.admit("b", 11) {
			t.Fatal("b's job held behind one left while the position was unknown")
		}
	})
	t.Run("no backlog", func(t *testing.T) {
		l := testLane(99)
		if l.admit("b", 1100) {
			t.Fatal("took a job with 99 jobs ahead, below the backlog threshold of 100")
		}
	})
	t.Run("already delivered", func(t *testing.T) {
		l := testLane(5000)
		if l.admit("b", 1000) {
			t.Fatal("took a job the consumer has delivered")
		}
	})
	t.Run("tenant queued behind", func(t *testing.T) {
		l := testLane(0)
		if l.admit("a", 1001) { // left to the consumer: it had no backlog yet
			t.Fatal("took a's first job without a backlog")
		}
		l.pending = 5000 // the backlog builds up behind it
		// ... so every later job of a stays behind it, in order.
		if l.admit("a", 1002) {
			t.Fatal("took a job of a tenant with a job queued in the backlog")
		}
		if !l.admit("b", 1003) {
			t.Fatal("did not take a job of a tenant with nothing queued")
		}
		// Once the consumer has passed a's queued jobs, a may pass too.
		l.observe(1002, 5000)
		if !l.admit("a", 1004) {
			t.Fatal("did not take a's job once its queued jobs were delivered")
		}
	})
	t.Run("tenant share", func(t *testing.T) {
		l := testLane(5000)
		for seq := uint64(1001); seq <= 1002; seq++ {
			if !l.admit("b", seq) {
				t.Fatalf("did not take b's job %d, within its share", seq)
			}
		}
		if l.admit("b", 1003) {
			t.Fatal("took a third job of b past its share of 2")
		}
		if l.admit("b", 1004) {
			t.Fatal("took a job of b behind one it left to the consumer")
		}
		l.observe(1004, 5000) // the consumer passed all of b's jobs
		if !l.admit("b", 1005) {
			t.Fatal("did not take b's job after the consumer passed the others")
		}
	})
	t.Run("left behind", func(t *testing.T) {
		l := testLane(5000)
		if !l.admit("b", 1001) {
			t.Fatal("did not take b's first job")
		}
		l.leave("b", 1001) // the lane could not copy it
		if l.admit("b", 1002) {
			t.Fatal("took b's job behind one the lane gave back to the consumer")
		}
	})
	t.Run("prune", func(t *testing.T) {
		l := testLane(5000)
		l.admit("a", 999) // already delivered: booked as queued
		l.admit("b", 1001)
		l.observe(2000, 5000)
		l.mu.Lock()
		l.prune()
		n := len(l.slow) + len(l.taken)
		l.mu.Unlock()
		if n != 0 {
			t.Fatalf("%d entries left after the consumer passed every booked job", n)
		}
	})
}

// TestLaneArrivals: a republished job is handed to the lane's work queue
// with its id, tenant and cost; messages that are not jobs (other
// subjects, moved copies, bad tenants or costs) are not.
func TestLaneArrivals(t *testing.T) {
	arrival := func(subject string, seq string, extra ...string) *nats.Msg {
		h := nats.Header{}
		h.Set("Nats-Stream", "JOBS")
		h.Set("Nats-Subject", subject)
		h.Set("Nats-Sequence", seq)
		for i := 0; i+1 < len(extra); i += 2 {
			h.Set(extra[i], extra[i+1])
		}
		return &nats.Msg{Subject: "_throttler.arrived.JOBS." + subject, Header: h}
	}
	l := testLane(5000)
	for _, m := range []*nats.Msg{
		arrival("sched.b.1", "1001"),                     // not a job subject
		arrival("jobs.b", "1002", HeaderJobID, "JOBS:7"), // a moved job's copy
		arrival("jobs", "1003"),                          // no tenant token
		arrival("jobs.b", "1004", "Job-Cost", "0"),       // bad cost
		arrival("jobs.b", "x"),                           // no sequence
		arrival("jobs.b", "1005", "Job-Cost", "3"),       // taken
	} {
		l.arrive(m)
	}
	if len(l.work) != 1 {
		t.Fatalf("%d arrivals handed on, want 1", len(l.work))
	}
	a := <-l.work
	if a.id != "JOBS:1005" || a.tenant != "b" || a.cost != 3 || a.subject != "jobs.b" || a.seq != 1005 {
		t.Fatalf("arrival %+v", a)
	}
}

// TestInParallel: every index is called once, never more than laneRequests
// at a time, and inParallel returns only when all calls have.
func TestInParallel(t *testing.T) {
	const n = 50
	var mu sync.Mutex
	calls := make([]int, n)
	running, most := 0, 0
	inParallel(n, func(i int) {
		mu.Lock()
		calls[i]++
		running++
		most = max(most, running)
		mu.Unlock()
		time.Sleep(time.Millisecond) // let calls overlap
		mu.Lock()
		running--
		mu.Unlock()
	})
	for i, c := range calls {
		if c != 1 {
			t.Errorf("index %d called %d times", i, c)
		}
	}
	if running != 0 || most > laneRequests || most < 2 {
		t.Errorf("%d running at return, at most %d at once; want 0 and 2..%d", running, most, laneRequests)
	}
}

// TestLaneSwitchesArrivals: the lane turns the stream's arrivals on when
// the jobs consumer has a backlog, off once it has had none for IdleOff,
// and after a failed switch waits before trying again.
func TestLaneSwitchesArrivals(t *testing.T) {
	ctx := context.Background()
	var calls []bool
	var fail error
	l := testLane(0)
	l.IdleOff = 50 * time.Millisecond
	l.Republish = func(_ context.Context, on bool) error {
		calls = append(calls, on)
		return fail
	}
	l.switchArrivals(ctx)
	if len(calls) != 0 {
		t.Fatalf("switched %v without a backlog while off", calls)
	}
	l.observe(2000, 5000) // a backlog
	select {
	case <-l.wake:
	default:
		t.Fatal("a backlog did not wake the lane")
	}
	l.switchArrivals(ctx)
	if !slices.Equal(calls, []bool{true}) || !l.on {
		t.Fatalf("calls %v, on %v after a backlog; want [true], on", calls, l.on)
	}
	l.observe(3000, 10) // the backlog is gone ...
	l.switchArrivals(ctx)
	if len(calls) != 1 {
		t.Fatalf("switched off at once: %v", calls)
	}
	time.Sleep(60 * time.Millisecond) // ... for IdleOff
	l.switchArrivals(ctx)
	if !slices.Equal(calls, []bool{true, false}) || l.on {
		t.Fatalf("calls %v, on %v after IdleOff without a backlog; want [true false], off", calls, l.on)
	}

	fail = errors.New("stream update refused")
	l.observe(4000, 5000)
	l.switchArrivals(ctx)
	l.switchArrivals(ctx) // within 10s of the failure: not tried
	if !slices.Equal(calls, []bool{true, false, true}) || l.on {
		t.Fatalf("calls %v, on %v after a failed switch; want one try, still off", calls, l.on)
	}
}

// TestLanePacesDeferrals: while arrivals come in, the deciding loop puts
// jobs off at no more than MoveRate a second, counting the time it spent
// deciding; it never waits after a group mostly admitted, nor once
// arrivals have stopped.
func TestLanePacesDeferrals(t *testing.T) {
	l := testLane(5000)
	l.MoveRate = 8000 // 125 µs a job: 8 ms for 64
	now := time.Unix(1000, 0)
	l.arrived.Store(now.UnixNano())

	if d := l.pause(now, 64, 64); d != 8*time.Millisecond {
		t.Fatalf("64 deferred: paused %v, want 8ms", d)
	}
	// The next group, decided 2 ms after the pause ended: the 2 ms count.
	now = now.Add(10 * time.Millisecond)
	if d := l.pause(now, 64, 64); d != 6*time.Millisecond {
		t.Fatalf("64 more, 2 ms spent deciding: paused %v, want 6ms", d)
	}
	if d := l.pause(now, 10, 64); d != 0 {
		t.Fatalf("a group mostly admitted: paused %v, want none", d)
	}
	// Idle for a while: no credit is banked.
	now = now.Add(500 * time.Millisecond)
	if d := l.pause(now, 32, 40); d != 4*time.Millisecond {
		t.Fatalf("after idling: paused %v, want 4ms", d)
	}
	// No arrival for over paceWindow: the lane is not in use.
	now = now.Add(paceWindow)
	if d := l.pause(now, 64, 64); d != 0 {
		t.Fatalf("arrivals stopped: paused %v, want none", d)
	}
	l.arrived.Store(now.UnixNano())
	l.MoveRate = -1
	if d := l.pause(now, 64, 64); d != 0 {
		t.Fatalf("MoveRate < 0: paused %v, want none", d)
	}
}

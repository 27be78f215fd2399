package fastlane

import (
	"testing"
	"time"
)

// testBacklog is a backlog whose jobs consumer was last seen at stream
// sequence 1000 with pending jobs left to deliver; its jobs are booked
// with a backlog threshold of 100 and a tenant share of 2, at times moved
// on by a second each, so that every booking prunes first.
type testBacklog struct {
	backlog
	now time.Time
}

func newTestBacklog(pending uint64) *testBacklog {
	b := &testBacklog{backlog: newBacklog(), now: t0}
	b.observe(1000, pending)
	return b
}

// take books the tenant's job at seq and reports whether the lane takes it.
func (b *testBacklog) take(tenant string, seq uint64) bool {
	b.now = b.now.Add(2 * time.Second)
	return b.book(tenant, seq, 100, 2, b.now)
}

// TestLaneTakesOnlyTenantsWithNothingQueued: the lane takes a job only
// while the jobs consumer has a backlog, only for a tenant with no job
// queued in it, and at most TenantShare of one tenant's jobs until the
// consumer passes them.
func TestLaneTakesOnlyTenantsWithNothingQueued(t *testing.T) {
	t.Run("position unknown", func(t *testing.T) {
		b := &testBacklog{backlog: newBacklog(), now: t0} // nothing delivered yet
		if b.take("b", 10) {
			t.Fatal("took a job before knowing the consumer's position")
		}
		b.observe(5, 5000)
		if !b.take("b", 11) {
			t.Fatal("b's job held behind one left while the position was unknown")
		}
	})
	t.Run("no backlog", func(t *testing.T) {
		b := newTestBacklog(99)
		if b.take("b", 1100) {
			t.Fatal("took a job with 99 jobs ahead, below the backlog threshold of 100")
		}
	})
	t.Run("backlog at the threshold", func(t *testing.T) {
		b := newTestBacklog(100)
		if !b.take("b", 1100) {
			t.Fatal("did not take a job with 100 jobs ahead, the backlog threshold")
		}
	})
	t.Run("already delivered", func(t *testing.T) {
		b := newTestBacklog(5000)
		if b.take("b", 1000) {
			t.Fatal("took a job the consumer has delivered")
		}
		// Being delivered, it holds nothing back.
		if !b.take("b", 1001) {
			t.Fatal("b's job held behind one the consumer has delivered")
		}
	})
	t.Run("tenant queued behind", func(t *testing.T) {
		b := newTestBacklog(0)
		if b.take("a", 1001) { // left to the consumer: it had no backlog yet
			t.Fatal("took a's first job without a backlog")
		}
		b.pending = 5000 // the backlog builds up behind it
		if got := b.observe(999, 0); got != 5000 {
			t.Fatalf("an older position replaced the latest: %d jobs left, want 5000", got)
		}
		// ... so every later job of a stays behind it, in order.
		if b.take("a", 1002) {
			t.Fatal("took a job of a tenant with a job queued in the backlog")
		}
		if !b.take("b", 1003) {
			t.Fatal("did not take a job of a tenant with nothing queued")
		}
		// Once the consumer has passed a's queued jobs, a may pass too.
		b.observe(1002, 5000)
		if !b.take("a", 1004) {
			t.Fatal("did not take a's job once its queued jobs were delivered")
		}
	})
	t.Run("tenant share", func(t *testing.T) {
		b := newTestBacklog(5000)
		for seq := uint64(1001); seq <= 1002; seq++ {
			if !b.take("b", seq) {
				t.Fatalf("did not take b's job %d, within its share", seq)
			}
		}
		if b.take("b", 1003) {
			t.Fatal("took a third job of b past its share of 2")
		}
		if b.take("b", 1004) {
			t.Fatal("took a job of b behind one it left to the consumer")
		}
		if !b.take("c", 1005) {
			t.Fatal("b's share held c back")
		}
		b.observe(1004, 5000) // the consumer passed all of b's jobs
		if !b.take("b", 1006) {
			t.Fatal("did not take b's job after the consumer passed the others")
		}
	})
	t.Run("share freed as the consumer passes", func(t *testing.T) {
		b := newTestBacklog(5000)
		b.take("b", 1001)
		b.take("b", 1010)
		b.observe(1005, 5000) // past 1001, not 1010: one of b's share is free
		if !b.take("b", 1020) {
			t.Fatal("did not take b's job with one of its two taken jobs passed")
		}
		if b.take("b", 1021) {
			t.Fatal("took a third job of b while two lie past the consumer")
		}
	})
	t.Run("left behind", func(t *testing.T) {
		b := newTestBacklog(5000)
		if !b.take("b", 1001) {
			t.Fatal("did not take b's first job")
		}
		b.leave("b", 1001) // the lane could not copy it
		if b.take("b", 1002) {
			t.Fatal("took b's job behind one the lane gave back to the consumer")
		}
		b.observe(1002, 5000)
		if !b.take("b", 1003) {
			t.Fatal("b still held once the consumer passed the job given back")
		}
	})
	t.Run("leaving frees the share", func(t *testing.T) {
		b := newTestBacklog(5000)
		b.take("b", 1001)
		b.take("b", 1002)
		b.leave("b", 1001)
		b.mu.Lock()
		taken, queued := append([]uint64(nil), b.taken["b"]...), b.queued["b"]
		b.mu.Unlock()
		if len(taken) != 1 || taken[0] != 1002 || queued != 1001 {
			t.Fatalf("after leaving 1001: taken %v, queued %d; want [1002], 1001", taken, queued)
		}
	})
	t.Run("leave keeps the latest queued", func(t *testing.T) {
		b := newTestBacklog(5000)
		b.take("b", 1001)
		b.take("b", 1002)
		b.take("b", 1003) // past the share: queued
		b.leave("b", 1001)
		b.mu.Lock()
		queued := b.queued["b"]
		b.mu.Unlock()
		if queued != 1003 {
			t.Fatalf("leaving 1001 moved b's queued job from 1003 to %d", queued)
		}
	})
	t.Run("prune", func(t *testing.T) {
		b := newTestBacklog(5000)
		b.take("a", 999) // already delivered: booked as queued
		b.take("b", 1001)
		b.take("c", 2500)
		b.observe(2000, 5000)
		b.take("d", 2001) // a second on: prunes first
		b.mu.Lock()
		_, a := b.queued["a"]
		_, bt := b.taken["b"]
		_, c := b.taken["c"]
		b.mu.Unlock()
		if a || bt || !c {
			t.Fatalf("after the consumer passed a's and b's jobs: a queued %v, b taken %v, c taken %v; want false, false, true", a, bt, c)
		}
	})
	t.Run("prune at most once a second", func(t *testing.T) {
		b := newTestBacklog(5000)
		b.book("a", 999, 100, 2, t0.Add(10*time.Second))
		b.observe(2000, 5000)
		b.book("d", 2001, 100, 2, t0.Add(10*time.Second+time.Second))
		b.mu.Lock()
		_, kept := b.queued["a"]
		b.mu.Unlock()
		if !kept {
			t.Fatal("pruned again within a second")
		}
	})
}

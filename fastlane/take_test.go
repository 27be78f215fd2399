package fastlane

import (
	"context"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/fastlane/fastcopy"
	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/throttle"
)

// TestLaneInParallel: every index is called once, up to laneRequests at a
// time and never more, and inParallel returns only when all calls have.
func TestLaneInParallel(t *testing.T) {
	for _, n := range []int{0, 1, laneRequests, 50} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			var mu sync.Mutex
			calls := make([]int, n)
			running, most, returned := 0, 0, 0
			// The first calls wait until as many run at once as may, or all.
			full, isFull := make(chan struct{}), false
			inParallel(n, func(i int) {
				mu.Lock()
				calls[i]++
				running++
				most = max(most, running)
				if running == min(n, laneRequests) && !isFull {
					isFull = true
					close(full)
				}
				mu.Unlock()
				<-full
				mu.Lock()
				running--
				returned++
				mu.Unlock()
			})
			mu.Lock()
			defer mu.Unlock()
			for i, c := range calls {
				if c != 1 {
					t.Errorf("index %d called %d times", i, c)
				}
			}
			if returned != n || most != min(n, laneRequests) {
				t.Errorf("%d of %d calls returned by the end, at most %d at once; want all, %d", returned, n, most, min(n, laneRequests))
			}
		})
	}
}

// job is the tenant's job the lane booked at seq, stored in the fake stream.
func (l *testLane) job(tenant string, seq uint64) arrival {
	l.stream.store("jobs."+tenant, seq, "job "+strconv.FormatUint(seq, 10))
	return arrival{id: "JOBS:" + strconv.FormatUint(seq, 10), tenant: tenant, subject: "jobs." + tenant, seq: seq, cost: 1, at: l.clock.Now()}
}

// queued reports whether the backlog holds the tenant's later jobs behind
// seq for the jobs consumer.
func (l *testLane) queued(tenant string, seq uint64) bool {
	l.backlog.mu.Lock()
	defer l.backlog.mu.Unlock()
	return l.backlog.queued[tenant] >= seq
}

// released is how fakeOwners records the release of b's job at seq.
func released(tenant string, seq uint64) string {
	return tenant + " JOBS:" + strconv.FormatUint(seq, 10) + " " + strconv.FormatInt(fastcopy.Incarnation(seq), 10)
}

// TestLanePassBacklog: a take claims each job for its copy, copies the jobs
// the jobs consumer has not reached and deletes their originals; a job it
// cannot take is left in the stream for the jobs consumer, its claim
// given up when it made one.
func TestLanePassBacklog(t *testing.T) {
	ctx := context.Background()
	t.Run("admitted", func(t *testing.T) {
		l := newTestLane(t, 5000)
		l.stream.msgs[1001] = &jetstream.RawStreamMsg{Subject: "jobs.b", Sequence: 1001, Data: []byte("payload"),
			Header: nats.Header{"Job-Cost": {"2"}, "Trace": {"x"}}, Time: t0.Add(-time.Second)}
		a := arrival{id: "JOBS:1001", tenant: "b", subject: "jobs.b", seq: 1001, cost: 2, at: l.clock.Now()}
		l.passBacklog(ctx, []arrival{a})

		if want := []throttle.Copy{{Request: throttle.Request{Tenant: "b", JobID: "JOBS:1001", Cost: 2},
			Incarnation: fastcopy.Incarnation(1001)}}; !reflect.DeepEqual(l.owners.decided, want) {
			t.Errorf("decided %+v, want %+v", l.owners.decided, want)
		}
		copies := l.js.copies()
		if len(copies) != 1 {
			t.Fatalf("%d copies, want 1", len(copies))
		}
		c := copies[0]
		for k, want := range map[string]string{
			header.JobID:          "JOBS:1001",
			header.Subject:        "jobs.b",
			header.Published:      t0.Add(-time.Second).Format(time.RFC3339Nano),
			fastcopy.Header:       fastcopy.Admitted,
			jetstream.MsgIDHeader: "fast:JOBS:1001",
			"Job-Cost":            "2",
			"Trace":               "x",
		} {
			if got := c.Header.Get(k); got != want {
				t.Errorf("copy header %s: %q, want %q", k, got, want)
			}
		}
		if c.Subject != "sched.f.b.1001" || string(c.Data) != "payload" {
			t.Errorf("copy on %s with %q, want sched.f.b.1001 with the original's data", c.Subject, c.Data)
		}
		if l.stream.has(1001) {
			t.Error("original kept")
		}
		if st := l.cfg.Stats.Snapshot()["b"]; st.FastLaned != 1 || st.RedisCalls != 1 {
			t.Errorf("b: %d fast-laned, %d Redis calls; want 1, 1", st.FastLaned, st.RedisCalls)
		}
		if len(l.owners.releases()) != 0 || len(l.owners.claimed) != 0 {
			t.Errorf("released %v, claimed %v; want neither", l.owners.releases(), l.owners.claimed)
		}
	})
	t.Run("reserved", func(t *testing.T) {
		l := newTestLane(t, 5000)
		l.owners.outcome["b"] = throttle.Reserved
		l.passBacklog(ctx, []arrival{l.job("b", 1001)})
		copies := l.js.copies()
		if len(copies) != 1 || copies[0].Header.Get(fastcopy.Header) != fastcopy.Reserved || l.stream.has(1001) {
			t.Fatalf("%d copies (%v), original kept %v; want one reserved copy, no original", len(copies), copies, l.stream.has(1001))
		}
		if !slices.Equal(l.owners.claimed, []string{"b JOBS:1001"}) {
			t.Errorf("claimed %v, want b's job (a deferral records no owner)", l.owners.claimed)
		}
	})
	// Jobs left to the jobs consumer: nothing copied, the original kept,
	// the tenant's later jobs held behind it.
	for _, tc := range []struct {
		name     string
		set      func(l *testLane)
		released bool // the claim made is given up
	}{
		{"reserved, the claim refused", func(l *testLane) {
			l.owners.outcome["b"], l.owners.claimOK = throttle.Reserved, false
		}, false},
		{"reserved, the claim fails", func(l *testLane) {
			l.owners.outcome["b"], l.owners.claimErr = throttle.Reserved, errBoom
		}, false},
		{"limited", func(l *testLane) { l.owners.outcome["b"] = throttle.Limited }, false},
		{"a duplicate", func(l *testLane) { l.owners.outcome["b"] = throttle.Duplicate }, false},
		{"deciding fails", func(l *testLane) { l.owners.decideErr = errBoom }, false},
		{"delivered before the claim", func(l *testLane) { l.jobs.delivered(1001) }, true},
		{"the consumer's position unknown", func(l *testLane) { l.jobs.infoErr = errBoom }, true},
		{"the original gone", func(l *testLane) { delete(l.stream.msgs, 1001) }, true},
		{"the publish refused", func(l *testLane) { l.js.publishErr = nats.ErrConnectionClosed }, true},
		{"the publish failed", func(l *testLane) { l.js.ackErr = nats.ErrNoResponders }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newTestLane(t, 5000)
			a := l.job("b", 1001)
			tc.set(l)
			l.passBacklog(ctx, []arrival{a})
			if n := len(l.js.copies()); n != 0 {
				t.Errorf("%d copies, want none", n)
			}
			if l.stream.msgs[1001] == nil && tc.name != "the original gone" {
				t.Error("original deleted")
			}
			var want []string
			if tc.released {
				want = []string{released("b", 1001)}
			}
			if got := l.owners.releases(); !slices.Equal(got, want) {
				t.Errorf("released %v, want %v", got, want)
			}
			if !l.queued("b", 1001) {
				t.Error("b's job not left to the jobs consumer")
			}
			if st := l.cfg.Stats.Snapshot()["b"]; st.FastLaned != 0 {
				t.Errorf("%d fast-laned, want 0", st.FastLaned)
			}
		})
	}
	t.Run("the publish timed out", func(t *testing.T) {
		// The copy may be stored yet: the claim is kept (taken over later),
		// and the original too.
		l := newTestLane(t, 5000)
		l.js.ackErr = jetstream.ErrAsyncPublishTimeout
		l.passBacklog(ctx, []arrival{l.job("b", 1001)})
		if len(l.owners.releases()) != 0 || !l.stream.has(1001) {
			t.Fatalf("released %v, original kept %v; want no release, the original kept", l.owners.releases(), l.stream.has(1001))
		}
	})
	t.Run("the publish failed, the copy stored", func(t *testing.T) {
		// Its ack was lost: the job is taken.
		l := newTestLane(t, 5000)
		l.js.ackErr = nats.ErrNoResponders
		l.stream.copies["sched.f.b.1001"] = true
		l.passBacklog(ctx, []arrival{l.job("b", 1001)})
		if len(l.owners.releases()) != 0 || l.stream.has(1001) {
			t.Fatalf("released %v, original kept %v; want no release, the original deleted", l.owners.releases(), l.stream.has(1001))
		}
		if st := l.cfg.Stats.Snapshot()["b"]; st.FastLaned != 1 {
			t.Errorf("%d fast-laned, want 1", st.FastLaned)
		}
	})
	t.Run("delivered as the lane last saw", func(t *testing.T) {
		// A take read the consumer's position past b's job: the next take
		// leaves it undecided, rather than charge b for a copy it would
		// then give up.
		l := newTestLane(t, 5000)
		l.jobs.delivered(1002)
		l.passBacklog(ctx, []arrival{l.job("c", 1003)})
		l.passBacklog(ctx, []arrival{l.job("b", 1001)})
		for _, d := range l.owners.decided {
			if d.Tenant == "b" {
				t.Fatalf("decided %+v: b's job, delivered as the lane last saw, was decided", l.owners.decided)
			}
		}
		if len(l.owners.releases()) != 0 || !l.stream.has(1001) || !l.queued("b", 1001) {
			t.Fatalf("released %v, original kept %v, left %v; want none, true, true", l.owners.releases(), l.stream.has(1001), l.queued("b", 1001))
		}
	})
	t.Run("booked too long ago", func(t *testing.T) {
		// Its copy would be stored too late for the takeover: left
		// undecided.
		l := newTestLane(t, 5000)
		a := l.job("b", 1001)
		l.clock.Advance(l.cfg.Deadline + time.Nanosecond)
		l.passBacklog(ctx, []arrival{a})
		if len(l.owners.decided) != 0 || !l.stream.has(1001) || !l.queued("b", 1001) {
			t.Fatalf("decided %d, original kept %v, left %v; want 0, true, true", len(l.owners.decided), l.stream.has(1001), l.queued("b", 1001))
		}
	})
	t.Run("a batch", func(t *testing.T) {
		// Each job settles on its own: b's admitted, c's limited, d's
		// delivered by the consumer before the claim, e's reserved.
		l := newTestLane(t, 5000)
		l.owners.outcome["c"], l.owners.outcome["e"] = throttle.Limited, throttle.Reserved
		l.jobs.delivered(1003)
		batch := []arrival{l.job("b", 1004), l.job("c", 1005), l.job("d", 1003), l.job("e", 1006)}
		batch[2].seq = 1003
		l.passBacklog(ctx, batch)
		var subjects []string
		for _, c := range l.js.copies() {
			subjects = append(subjects, c.Subject+" "+c.Header.Get(fastcopy.Header))
		}
		if want := []string{"sched.f.b.1004 " + fastcopy.Admitted, "sched.f.e.1006 " + fastcopy.Reserved}; !slices.Equal(subjects, want) {
			t.Errorf("copies %v, want %v", subjects, want)
		}
		if want := []string{released("d", 1003)}; !slices.Equal(l.owners.releases(), want) {
			t.Errorf("released %v, want %v", l.owners.releases(), want)
		}
		for seq, kept := range map[uint64]bool{1003: true, 1004: false, 1005: true, 1006: false} {
			if l.stream.has(seq) != kept {
				t.Errorf("original %d kept %v, want %v", seq, !kept, kept)
			}
		}
	})
}

package fastlane

import (
	"testing"
	"time"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/tenant"
)

// TestLaneOnArrival: an arriving job the backlog books for the lane reaches
// Run's work with its id, tenant, subject, sequence and cost; messages
// that are not jobs to take (moved copies, bad tenants or costs, arrivals
// stored too long ago, unreadable metadata) do not.
func TestLaneOnArrival(t *testing.T) {
	// The lane's Deadline is 4s (the default).
	for _, tc := range []struct {
		name    string
		msg     func(now time.Time) *fakeMsg
		arrived bool // counts as an arrival for the pace
	}{
		{"a moved job's copy", func(now time.Time) *fakeMsg {
			return arrivalMsg("jobs.b", 1001, now, header.JobID, "JOBS:7")
		}, false},
		{"no metadata", func(now time.Time) *fakeMsg {
			m := arrivalMsg("jobs.b", 1001, now)
			m.metaErr = errBoom
			return m
		}, false},
		{"no tenant token", func(now time.Time) *fakeMsg { return arrivalMsg("jobs", 1001, now) }, true},
		{"a malformed tenant", func(now time.Time) *fakeMsg { return arrivalMsg("jobs.b@c", 1001, now) }, true},
		{"a zero cost", func(now time.Time) *fakeMsg { return arrivalMsg("jobs.b", 1001, now, "Job-Cost", "0") }, true},
		{"a malformed cost", func(now time.Time) *fakeMsg { return arrivalMsg("jobs.b", 1001, now, "Job-Cost", "x") }, true},
		{"two costs", func(now time.Time) *fakeMsg {
			return arrivalMsg("jobs.b", 1001, now, "Job-Cost", "1", "Job-Cost", "2")
		}, true},
		{"stored longer ago than Deadline", func(now time.Time) *fakeMsg {
			return arrivalMsg("jobs.b", 1001, now.Add(-4*time.Second-time.Nanosecond))
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newTestLane(t, 5000)
			l.onArrival(tc.msg(l.clock.Now()))
			if len(l.work) != 0 {
				t.Fatalf("handed %+v to Run", <-l.work)
			}
			if got := l.arrived.Load() != 0; got != tc.arrived {
				t.Errorf("counted as an arrival: %v, want %v", got, tc.arrived)
			}
		})
	}

	t.Run("taken", func(t *testing.T) {
		l := newTestLane(t, 5000)
		stored := l.clock.Now()
		l.clock.Advance(4 * time.Second) // stored Deadline ago: still in time
		l.onArrival(arrivalMsg("jobs.b", 1001, stored, "Job-Cost", "3"))
		if len(l.work) != 1 {
			t.Fatalf("%d jobs handed to Run, want 1", len(l.work))
		}
		want := arrival{id: "JOBS:1001", tenant: "b", subject: "jobs.b", seq: 1001, cost: 3, at: l.clock.Now()}
		if a := <-l.work; a != want {
			t.Fatalf("handed %+v, want %+v", a, want)
		}
		if got := time.Unix(0, l.arrived.Load()); !got.Equal(l.clock.Now()) {
			t.Errorf("arrival counted at %v, want %v", got, l.clock.Now())
		}
	})
	t.Run("tenant from a header", func(t *testing.T) {
		l := newTestLane(t, 5000, func(c *Config) { c.Tenant = tenant.FromHeader("Tenant") })
		l.onArrival(arrivalMsg("jobs.any", 1001, l.clock.Now(), "Tenant", "b"))
		if len(l.work) != 1 {
			t.Fatalf("%d jobs handed to Run, want 1", len(l.work))
		}
		if a := <-l.work; a.tenant != "b" || a.subject != "jobs.any" || a.cost != 1 {
			t.Fatalf("handed %+v, want b's job on jobs.any of cost 1", a)
		}
	})
	t.Run("group from a header", func(t *testing.T) {
		for _, g := range []struct {
			name     string
			kv       []string
			required bool
			want     string // the group handed to Run; "-": none handed
		}{
			{"read", []string{"Org", "org-1"}, false, "org-1"},
			{"missing, not required", nil, false, ""},
			{"missing, required", nil, true, "-"},
			{"malformed", []string{"Org", "org 1"}, false, "-"},
			{"twice", []string{"Org", "a", "Org", "b"}, false, "-"},
		} {
			l := newTestLane(t, 5000, func(c *Config) { c.Group, c.GroupRequired = tenant.FromHeader("Org"), g.required })
			l.onArrival(arrivalMsg("jobs.b", 1001, l.clock.Now(), g.kv...))
			switch {
			case g.want == "-" && len(l.work) != 0:
				t.Errorf("%s: handed %+v to Run, want it left to the jobs consumer", g.name, <-l.work)
			case g.want != "-" && len(l.work) != 1:
				t.Errorf("%s: %d jobs handed to Run, want 1", g.name, len(l.work))
			case g.want != "-":
				if a := <-l.work; a.group != g.want {
					t.Errorf("%s: group %q, want %q", g.name, a.group, g.want)
				}
			}
		}
	})
	t.Run("left to the jobs consumer", func(t *testing.T) {
		l := newTestLane(t, 50) // under the backlog threshold of 100
		l.onArrival(arrivalMsg("jobs.b", 1001, l.clock.Now()))
		if len(l.work) != 0 {
			t.Fatal("took a job without a backlog")
		}
	})
}

// TestLaneOnArrivalKeepsATenantsOrder: a job the lane does not take, for any
// reason, holds its tenant's later jobs behind it until the jobs consumer
// has delivered it, so that no job of the tenant passes it.
func TestLaneOnArrivalKeepsATenantsOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		leave func(l *testLane) // b's job at 1001 arrives and is not taken
	}{
		{"stored longer ago than Deadline", func(l *testLane) {
			l.onArrival(arrivalMsg("jobs.b", 1001, l.clock.Now().Add(-5*time.Second)))
		}},
		{"part of the backlog read first", func(l *testLane) {
			// The lane began reading when the stream's last job was 1001:
			// b's job there is in the backlog, however recent.
			l.readFrom.Store(1002)
			l.onArrival(arrivalMsg("jobs.b", 1001, l.clock.Now()))
		}},
		{"Run's work full", func(l *testLane) {
			for range cap(l.work) {
				l.work <- arrival{}
			}
			l.onArrival(arrivalMsg("jobs.b", 1001, l.clock.Now()))
			if len(l.work) != cap(l.work) {
				t.Fatalf("%d jobs in Run's work, want %d", len(l.work), cap(l.work))
			}
			for range cap(l.work) {
				<-l.work
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newTestLane(t, 5000)
			tc.leave(l)
			l.onArrival(arrivalMsg("jobs.b", 1002, l.clock.Now()))
			if len(l.work) != 0 {
				t.Fatalf("took b's job at 1002, passing b's job at 1001 left to the jobs consumer: %+v", <-l.work)
			}
			l.onArrival(arrivalMsg("jobs.c", 1003, l.clock.Now()))
			if len(l.work) != 1 {
				t.Fatal("c's job was held back by b's")
			}
			<-l.work
			l.Observe(1002, 5000) // the jobs consumer delivered b's jobs
			l.onArrival(arrivalMsg("jobs.b", 1004, l.clock.Now()))
			if len(l.work) != 1 {
				t.Fatal("b's job held back after the jobs consumer delivered the ones left to it")
			}
		})
	}
}

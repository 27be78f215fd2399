package ops_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/internal/ops"
	"github.com/throttler/throttler/tenant"
	"github.com/throttler/throttler/throttle"
)

// unwaiter records the jobs a purge removes from the waiting lists.
type unwaiter struct{ ids []string }

func (u *unwaiter) Unwait(_ context.Context, _ string, ids []string) (int, error) {
	u.ids = append(u.ids, ids...)
	return len(ids), nil
}

// store publishes a message to the jobs stream.
func (f *fixture) store(subj string, h nats.Header) {
	f.t.Helper()
	if _, err := f.js.PublishMsg(f.ctx, &nats.Msg{Subject: subj, Header: h, Data: []byte("x")}); err != nil {
		f.t.Fatalf("publish %s: %v", subj, err)
	}
}

// copyHeader is what a worker's copy of the job id of tenant carries.
func copyHeader(id, ten, reason string) nats.Header {
	return nats.Header{header.JobID: {id}, header.Subject: {"jobs." + ten}, header.WaitReason: {reason},
		header.Published: {time.Now().UTC().Format(time.RFC3339Nano)}}
}

// TestPurgeKinds: each kind of waiting job is removed and counted as such,
// jobs delivered and not acked stay (counted in flight), and another
// tenant's stay, whether the tenant is read from the subject or a header.
func TestPurgeKinds(t *testing.T) {
	for _, byHeader := range []bool{false, true} {
		t.Run(fmt.Sprintf("by header %v", byHeader), func(t *testing.T) {
			f := setup(t)
			hdr := func(ten string) nats.Header { return nats.Header{} }
			subj := func(ten string) string { return "jobs." + ten }
			if byHeader {
				f.fleet.TenantFrom = tenant.FromHeader("X-Tenant")
				hdr = func(ten string) nats.Header { return nats.Header{"X-Tenant": {ten}} }
				subj = func(string) string { return "jobs.any" }
			}
			with := func(h nats.Header, ten string) nats.Header {
				for k, v := range hdr(ten) {
					h[k] = v
				}
				return h
			}
			// Five of acme's and two of globex's stored; the jobs consumer
			// is handed the first three (two of acme's), which it does not
			// ack: running.
			for _, ten := range []string{"acme", "globex", "acme", "acme", "acme", "globex", "acme"} {
				f.store(subj(ten), hdr(ten))
			}
			c, err := f.js.CreateConsumer(f.ctx, "JOBS", jetstream.ConsumerConfig{Durable: "throttler", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "jobs.>"})
			must(t, err)
			batch, err := c.Fetch(3)
			must(t, err)
			for range batch.Messages() {
			}
			f.store("sched.acme.11", with(copyHeader("JOBS:11", "acme", "limit 1/h"), "acme"))
			f.store("sched.acme.12", with(copyHeader("JOBS:12", "acme", header.WaitLease+"running:2"), "acme"))
			f.store("sched.acme.13", with(copyHeader("JOBS:13", "acme", header.WaitLease+"max running:5"), "acme"))
			f.store("sched.f.acme.14", with(copyHeader("JOBS:14", "acme", ""), "acme"))
			f.store("sched.k.acme.15", with(copyHeader("JOBS:15", "acme", header.WaitLease+"running:2"), "acme"))
			f.store("sched.acme.18", with(copyHeader("JOBS:18", "acme", header.WaitPaused), "acme"))
			f.store("sched.globex.16", with(copyHeader("JOBS:16", "globex", header.WaitLease+"running:2"), "globex"))
			f.store("sched.k.globex.17", with(copyHeader("JOBS:17", "globex", ""), "globex"))

			u := &unwaiter{}
			dry, err := ops.PurgeTenant(f.ctx, f.fleet, ops.PurgeOptions{Tenant: "acme", DryRun: true, Waiting: u})
			must(t, err)
			// Charged: the one moved for its slot and the fast copy, not the
			// paused one.
			want := ops.PurgeReport{Tenant: "acme", DryRun: true, Pending: 3, Moved: 2, Parked: 2, Fast: 1, Woken: 1, Removed: 9, Charged: 2, InFlight: 2, Passes: 1}
			if fmt.Sprint(dry) != fmt.Sprint(want) || len(u.ids) != 0 {
				t.Errorf("dry run: %+v (unwaited %v), want %+v", dry, u.ids, want)
			}
			rep, err := ops.PurgeTenant(f.ctx, f.fleet, ops.PurgeOptions{Tenant: "acme", Waiting: u})
			must(t, err)
			want.DryRun, want.Unwaited, want.Passes = false, 2, 2
			if fmt.Sprint(rep) != fmt.Sprint(want) {
				t.Errorf("purge: %+v, want %+v", rep, want)
			}
			if slices.Sort(u.ids); fmt.Sprint(u.ids) != "[JOBS:12 JOBS:13]" {
				t.Errorf("unwaited %v, want the two parked", u.ids)
			}
			info, err := f.jobs.Info(f.ctx)
			must(t, err)
			// Left: acme's two delivered, globex's two jobs and two copies.
			if info.State.Msgs != 6 {
				t.Errorf("%d messages left, want 6", info.State.Msgs)
			}
			g, err := ops.PurgeTenant(f.ctx, f.fleet, ops.PurgeOptions{Tenant: "globex", DryRun: true})
			must(t, err)
			if g.Pending+g.Parked+g.Woken != 3 || g.InFlight != 1 {
				t.Errorf("globex: %+v, want 1 pending, 1 parked, 1 woken, 1 in flight", g)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// unqueuer records the jobs a purge takes out of the levels' lists.
type unqueuer struct{ jobs []throttle.QueuedJob }

func (u *unqueuer) Unqueue(_ context.Context, _ string, jobs []throttle.QueuedJob) (int, error) {
	u.jobs = append(u.jobs, jobs...)
	return len(jobs), nil
}

// TestPurgeTakesTurnsOutOfTheLevels: a job parked for its turn under a
// level above its tenant is removed with the others (counted as moved),
// and taken out of that level's waiting list, named with its cost; a dry
// run takes nothing out, and a copy moved for its slot is not a turn.
func TestPurgeTakesTurnsOutOfTheLevels(t *testing.T) {
	f := setup(t)
	turn := copyHeader("JOBS:21", "acme", header.WaitTurn+"_global")
	turn.Set("Job-Cost", "3")
	f.store("sched.acme.21", turn)
	f.store("sched.acme.22", copyHeader("JOBS:22", "acme", header.WaitTurn+"group.org"))
	f.store("sched.acme.23", copyHeader("JOBS:23", "acme", "limit 1/h"))
	u := &unqueuer{}
	dry, err := ops.PurgeTenant(f.ctx, f.fleet, ops.PurgeOptions{Tenant: "acme", DryRun: true, Levels: u})
	must(t, err)
	if dry.Moved != 3 || dry.Unqueued != 0 || len(u.jobs) != 0 {
		t.Errorf("dry run: %+v, taken out %v; want 3 moved, none taken out", dry, u.jobs)
	}
	rep, err := ops.PurgeTenant(f.ctx, f.fleet, ops.PurgeOptions{Tenant: "acme", Levels: u})
	must(t, err)
	if rep.Moved != 3 || rep.Unqueued != 2 {
		t.Errorf("purge: %+v; want 3 moved, 2 taken out of the levels' lists", rep)
	}
	want := []throttle.QueuedJob{{Level: "_global", JobID: "JOBS:21", Cost: 3}, {Level: "group.org", JobID: "JOBS:22", Cost: 1}}
	if fmt.Sprint(u.jobs) != fmt.Sprint(want) {
		t.Errorf("taken out %v, want %v", u.jobs, want)
	}
}

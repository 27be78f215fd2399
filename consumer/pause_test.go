package consumer

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

// fakePauser pauses the tenants in its map, each until the time given
// (zero: until resumed).
type fakePauser struct {
	mu     sync.Mutex
	paused map[string]time.Time
	since  time.Time // when every pause began
}

// Paused implements Pauser.
func (p *fakePauser) Paused(tenant string, now time.Time) (string, time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	until, ok := p.paused[tenant]
	if !ok || (!until.IsZero() && !now.Before(until)) {
		return "", time.Time{}, false
	}
	return "maintenance", until, true
}

// Since implements Pauser: every pause began at since.
func (p *fakePauser) Since(tenant string, now time.Time) time.Time {
	if _, _, ok := p.Paused(tenant, now); ok {
		return p.since
	}
	return time.Time{}
}

func (p *fakePauser) set(tenant string, until time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused[tenant] = until
}

// TestPausedTenantIsNeitherDecidedNorRun: a paused tenant's jobs are not
// asked of the throttle (so not charged) and not run; each is deferred as
// a parked, paused job with the pause's reason, for PauseRecheck or until
// the pause ends if sooner (and pauseEndGrace, the time a worker has to
// end it first). Another tenant's jobs run as usual.
func TestPausedTenantIsNeitherDecidedNorRun(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)}
	e := setup(t)
	deferrer := &fakeDeferrer{}
	pauser := &fakePauser{paused: map[string]time.Time{"acme": {}, "soon": clock.Now().Add(10 * time.Second)}}
	e.params.Deferrer = deferrer
	e.params.Pauses = pauser
	e.params.Config.Now = clock.Now
	e.params.Config.PauseRecheck = time.Minute
	e.start()
	paused, soon, other := newMsg(1, "jobs.acme"), newMsg(2, "jobs.soon"), newMsg(3, "jobs.globex")
	e.push(paused, soon, other)
	e.waitSettled(paused)
	e.waitSettled(soon)
	e.waitSettled(other)
	e.stop()

	for _, c := range e.decider.asked() {
		if c.Tenant != "globex" {
			t.Fatalf("the throttle was asked about %s's job %s: a paused tenant's jobs must not be charged", c.Tenant, c.JobID)
		}
	}
	ran := e.ran.all()
	if len(ran) != 1 || ran[0].Tenant != "globex" {
		t.Fatalf("ran %+v, want only globex's job", ran)
	}
	ds := deferrer.deferred()
	if len(ds) != 2 {
		t.Fatalf("deferrals %+v, want acme's and soon's", ds)
	}
	wantWait := map[string]time.Duration{"acme": time.Minute, "soon": 10*time.Second + pauseEndGrace}
	for _, d := range ds {
		if !d.Paused || !d.Park || !strings.HasPrefix(d.Reason, header.WaitPaused) || !strings.Contains(d.Reason, "maintenance") {
			t.Errorf("deferral of %s: paused %v park %v reason %q; want a parked paused job with the pause's reason", d.Job.Tenant, d.Paused, d.Park, d.Reason)
		}
		if d.Wait != wantWait[d.Job.Tenant] {
			t.Errorf("deferral of %s waits %s, want %s", d.Job.Tenant, d.Wait, wantWait[d.Job.Tenant])
		}
	}
	if got := e.w.Stats()["acme"].Paused; got != 1 {
		t.Errorf("acme's Paused count = %d, want 1", got)
	}
}

// TestReleasedJobsRunWhileThePauseIsStored: a job a resume released
// (header.Released at or after the pause's start) is decided and run
// although the pause is still stored, so that a resume brings the paused
// jobs back before new ones; a job released from an earlier pause, and a
// new job, wait out the pause in force.
func TestReleasedJobsRunWhileThePauseIsStored(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)}
	since := clock.Now().Add(-time.Minute)
	e := setup(t)
	deferrer := &fakeDeferrer{}
	e.params.Deferrer = deferrer
	e.params.Pauses = &fakePauser{paused: map[string]time.Time{"acme": {}}, since: since}
	e.params.Config.Now = clock.Now
	e.start()
	released := newMsg(1, "jobs.acme", header.Released, since.Add(time.Second).Format(time.RFC3339Nano))
	earlier := newMsg(2, "jobs.acme", header.Released, since.Add(-time.Second).Format(time.RFC3339Nano))
	fresh := newMsg(3, "jobs.acme")
	e.push(released, earlier, fresh)
	e.waitSettled(released, earlier, fresh)
	e.stop()

	if ran := e.ran.all(); len(ran) != 1 || string(ran[0].Data) != "job 1" {
		t.Fatalf("ran %+v, want only the job released from the pause in force", ran)
	}
	ds := deferrer.deferred()
	if len(ds) != 2 {
		t.Fatalf("deferrals %+v, want the job released from an earlier pause and the new one", ds)
	}
	for _, d := range ds {
		if !d.Paused {
			t.Errorf("job %s deferred, but not as paused: %+v", d.Job.ID, d)
		}
	}
}

// TestPauseStopsAnAdmittedJobBeforeItStarts: a job admitted before its
// tenant was paused, waiting for a handler slot, does not start: its owner
// record is given up and it is deferred as a paused job.
func TestPauseStopsAnAdmittedJobBeforeItStarts(t *testing.T) {
	e := setup(t)
	deferrer := &fakeDeferrer{}
	holder := &fakeHolder{}
	pauser := &fakePauser{paused: map[string]time.Time{}}
	e.params.Deferrer = deferrer
	e.params.Holder = holder
	e.params.Pauses = pauser
	e.params.Config.Concurrency = 1
	release := make(chan struct{})
	started := make(chan string, 4)
	e.params.Handler = func(ctx context.Context, job Job) error {
		started <- job.ID
		if job.Tenant == "globex" {
			<-release // holds the only slot
		}
		e.ran.add(job)
		return nil
	}
	e.start()
	blocker := newMsg(1, "jobs.globex")
	e.push(blocker)
	<-started
	admitted := newMsg(2, "jobs.acme")
	e.push(admitted)
	// The acme job is admitted and waits for the slot; pause acme, then
	// free the slot.
	testenv.Eventually(t, waitFor, "acme's job decided", func() bool { return len(e.decider.asked()) == 2 })
	pauser.set("acme", time.Time{})
	close(release)
	e.waitSettled(admitted)
	e.stop()

	for _, j := range e.ran.all() {
		if j.Tenant == "acme" {
			t.Fatalf("acme's job ran after acme was paused")
		}
	}
	ds := deferrer.deferred()
	if len(ds) != 1 || !ds[0].Paused || ds[0].Job.Tenant != "acme" {
		t.Fatalf("deferrals %+v, want acme's job deferred as paused", ds)
	}
	if _, releases := holder.recorded(); len(releases) != 1 || !strings.HasPrefix(releases[0], "acme ") {
		t.Fatalf("owner releases %v, want acme's job's", releases)
	}
}

// TestFairDeferrerMovesPausedJobs: a paused job is moved off the consumer
// even when its wait is short (its pause ends soon); a limited job with
// the same wait is NAK'd.
func TestFairDeferrerMovesPausedJobs(t *testing.T) {
	nak, move := &fakeDeferrer{}, &fakeDeferrer{}
	f := &FairDeferrer{Nak: nak, Move: move, MoveAfter: 5 * time.Second, TenantShare: 100}
	paused := Deferral{Msg: newMsg(1, "jobs.acme"), Job: Job{Tenant: "acme", ID: "JOBS:1"}, Wait: time.Second, Park: true, Paused: true, Reason: "paused"}
	limited := Deferral{Msg: newMsg(2, "jobs.acme"), Job: Job{Tenant: "acme", ID: "JOBS:2"}, Wait: time.Second, Reason: "limit 1/s"}
	f.Defer(context.Background(), []Deferral{paused, limited})
	if m := move.deferred(); len(m) != 1 || !m[0].Paused {
		t.Fatalf("moved %+v, want the paused job", m)
	}
	if n := nak.deferred(); len(n) != 1 || n[0].Paused {
		t.Fatalf("NAK'd %+v, want the limited job", n)
	}
}

// fakeUnreserver records the slots given up.
type fakeUnreserver struct {
	mu    sync.Mutex
	slots []string
}

func (u *fakeUnreserver) Unreserve(_ context.Context, slots []throttle.Slot) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, s := range slots {
		u.slots = append(u.slots, s.Tenant+" "+s.JobID)
	}
	return nil
}

// TestPauseGivesUpSlots: a paused tenant's job that may hold a slot (a
// redelivery, a moved copy back for its slot) gives it up, so that on
// resume it is charged anew; a fresh job holds none, and a job back from
// a pause gave its slot up already.
func TestPauseGivesUpSlots(t *testing.T) {
	e := setup(t)
	u := &fakeUnreserver{}
	e.params.Deferrer = &fakeDeferrer{}
	e.params.Pauses = &fakePauser{paused: map[string]time.Time{"acme": {}}}
	e.params.Unreserver = u
	e.start()
	fresh := newMsg(1, "jobs.acme")
	redelivered := newMsg(2, "jobs.acme").redelivered()
	moved := newMsg(5, "sched.acme.3", header.JobID, "JOBS:3", header.Subject, "jobs.acme", header.WaitReason, "limit 5/s")
	backFromPause := newMsg(6, "sched.acme.4", header.JobID, "JOBS:4", header.Subject, "jobs.acme", header.WaitReason, header.WaitPaused+": x")
	e.push(fresh, redelivered, moved, backFromPause)
	e.waitSettled(fresh, redelivered, moved, backFromPause)
	e.stop()
	u.mu.Lock()
	defer u.mu.Unlock()
	slices.Sort(u.slots)
	if want := []string{"acme JOBS:2", "acme JOBS:3"}; !slices.Equal(u.slots, want) {
		t.Fatalf("slots given up %v, want %v", u.slots, want)
	}
}

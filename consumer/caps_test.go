package consumer

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

// fakeLeaser records the lease calls and answers Finish with finishWake,
// Forfeit with forfeitWake.
type fakeLeaser struct {
	finishWake, forfeitWake []throttle.Waiter
	// lost, when set, says which of the leases Renew renews it reports
	// expired.
	lost func([]throttle.Lease) []throttle.Lease

	mu        sync.Mutex
	finished  [][]throttle.Lease
	renewed   [][]throttle.Lease
	forfeited []throttle.Waiter
}

func (l *fakeLeaser) Finish(_ context.Context, ls []throttle.Lease) ([]throttle.Waiter, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.finished = append(l.finished, ls)
	w := l.finishWake
	l.finishWake = nil
	return w, nil
}

func (l *fakeLeaser) Renew(_ context.Context, ls []throttle.Lease) ([]throttle.Lease, error) {
	l.mu.Lock()
	l.renewed = append(l.renewed, ls)
	lost := l.lost
	l.mu.Unlock()
	if lost != nil {
		return lost(ls), nil
	}
	return nil, nil
}

func (l *fakeLeaser) Poke(context.Context, []string) ([]throttle.Waiter, error) { return nil, nil }

func (l *fakeLeaser) Forfeit(_ context.Context, w throttle.Waiter, fleet bool) ([]throttle.Waiter, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if fleet {
		return nil, nil
	}
	l.forfeited = append(l.forfeited, w)
	next := l.forfeitWake
	l.forfeitWake = nil
	return next, nil
}

func (l *fakeLeaser) calls() (finished, renewed [][]throttle.Lease, forfeited []throttle.Waiter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.finished), slices.Clone(l.renewed), slices.Clone(l.forfeited)
}

// fakeWaker wakes the job ids in parked, and finds no other.
type fakeWaker struct {
	parked map[string]bool

	mu    sync.Mutex
	asked []string
}

func (w *fakeWaker) Wake(_ context.Context, _ string, jobID string) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.asked = append(w.asked, jobID)
	return w.parked[jobID], nil
}

func (w *fakeWaker) woken() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.asked)
}

// A job the cap holds is parked: deferred on its own for ParkFor (at most
// 2 minutes before a run under the cap is seen), with the
// cap in its reason, counted; no handler runs.
func TestCappedJobIsParked(t *testing.T) {
	e := setup(t)
	deferrer := &fakeDeferrer{}
	e.params.Deferrer = deferrer
	e.params.Leases = &fakeLeaser{}
	e.params.Config.ParkFor = 90 * time.Second
	e.decider.decide = func(context.Context, throttle.Copy) throttle.Result {
		return throttle.Result{Decision: throttle.Decision{Outcome: throttle.Capped, CapKind: throttle.TenantCap, CappedBy: "running:3", Ahead: 4}}
	}
	e.start()
	m := newMsg(5, "jobs.acme")
	e.push(m)
	e.waitSettled(m)
	e.stop()
	ds := deferrer.deferred()
	if len(ds) != 1 || !ds[0].Park || ds[0].Wait != 90*time.Second || !strings.Contains(ds[0].Reason, "running:3") {
		t.Fatalf("deferrals %+v, want one parked for 90s under running:3", ds)
	}
	if s := e.stats("acme"); s.CapDeferred != 1 || s.Admitted != 0 || s.Deferred != 0 {
		t.Errorf("stats %+v, want 1 cap deferral, nothing admitted or throttle-deferred", s)
	}
	if got := e.ran.ids(); len(got) != 0 {
		t.Errorf("handled %v, want nothing", got)
	}
}

// An admitted job's leases are given back after it is acked; the jobs
// that makes turn are woken, and one without a parked copy forfeits its
// turn, whose next in line is woken in turn. A decision's own Wake list is
// woken too.
func TestLeasesGivenBackAndTurnsHandedOn(t *testing.T) {
	e := setup(t)
	lease := throttle.Lease{Tenant: "acme", Token: "t1"}
	leaser := &fakeLeaser{
		finishWake:  []throttle.Waiter{{Tenant: "acme", JobID: "JOBS:9"}, {Tenant: "acme", JobID: "JOBS:gone"}},
		forfeitWake: []throttle.Waiter{{Tenant: "acme", JobID: "JOBS:10"}},
	}
	waker := &fakeWaker{parked: map[string]bool{"JOBS:9": true, "JOBS:10": true, "JOBS:11": true}}
	e.params.Leases, e.params.Waker = leaser, waker
	e.decider.decide = func(context.Context, throttle.Copy) throttle.Result {
		return throttle.Result{Decision: throttle.Decision{Outcome: throttle.Admitted, Lease: lease},
			Wake: []throttle.Waiter{{Tenant: "acme", JobID: "JOBS:11"}}}
	}
	e.start()
	m := newMsg(5, "jobs.acme")
	e.push(m)
	e.waitSettled(m)
	testenv.Eventually(t, 5*time.Second, "every turn handed on", func() bool { return len(waker.woken()) == 4 })
	e.stop()

	wantSettled(t, m, ack)
	finished, _, forfeited := leaser.calls()
	if len(finished) != 1 || !slices.Equal(finished[0], []throttle.Lease{lease}) {
		t.Errorf("Finish calls %v, want one with the job's lease", finished)
	}
	if len(forfeited) != 1 || forfeited[0].JobID != "JOBS:gone" {
		t.Errorf("forfeited %v, want JOBS:gone", forfeited)
	}
	woken := waker.woken()
	slices.Sort(woken)
	if want := []string{"JOBS:10", "JOBS:11", "JOBS:9", "JOBS:gone"}; !slices.Equal(woken, want) {
		t.Errorf("asked to wake %v, want %v", woken, want)
	}
	if s := e.stats("acme"); s.Woken != 3 || s.Running != 0 {
		t.Errorf("stats %+v, want 3 woken and none running", s)
	}
}

// A running job's lease is renewed every LeaseTTL/3 until it ends.
func TestLeaseRenewedWhileRunning(t *testing.T) {
	e := setup(t)
	lease := throttle.Lease{Tenant: "acme", Token: "t1"}
	leaser := &fakeLeaser{}
	e.params.Leases = leaser
	e.params.Config.LeaseTTL = 60 * time.Millisecond
	release, done := newSignal(t)
	e.params.Handler = func(ctx context.Context, _ Job) error {
		<-release
		return nil
	}
	e.decider.decide = func(context.Context, throttle.Copy) throttle.Result {
		return throttle.Result{Decision: throttle.Decision{Outcome: throttle.Admitted, Lease: lease}}
	}
	e.start()
	m := newMsg(5, "jobs.acme")
	e.push(m)
	testenv.Eventually(t, 5*time.Second, "the lease renewed twice", func() bool {
		_, renewed, _ := leaser.calls()
		return len(renewed) >= 2
	})
	if s := e.stats("acme"); s.Running != 1 {
		t.Errorf("running %d while the job runs, want 1", s.Running)
	}
	done()
	e.waitSettled(m)
	e.stop()
	_, renewed, _ := leaser.calls()
	for _, r := range renewed {
		if !slices.Equal(r, []throttle.Lease{lease}) {
			t.Fatalf("renewed %v, want the job's lease", r)
		}
	}
}

// A lease Renew reports expired counts as lost while its job runs, but
// not when the job ended, and gave the lease back, while the renewal was
// under way.
func TestLeaseLostOnlyWhileItsJobRuns(t *testing.T) {
	for _, ended := range []bool{false, true} {
		e := setup(t)
		lease := throttle.Lease{Tenant: "acme", Token: "t1"}
		release, done := newSignal(t)
		m := newMsg(5, "jobs.acme")
		var once sync.Once
		leaser := &fakeLeaser{lost: func(ls []throttle.Lease) []throttle.Lease {
			once.Do(func() {
				if ended {
					done()
					e.waitSettled(m)
				}
			})
			return ls
		}}
		e.params.Leases = leaser
		e.params.Config.LeaseTTL = 60 * time.Millisecond
		e.params.Handler = func(ctx context.Context, _ Job) error {
			<-release
			return nil
		}
		e.decider.decide = func(context.Context, throttle.Copy) throttle.Result {
			return throttle.Result{Decision: throttle.Decision{Outcome: throttle.Admitted, Lease: lease}}
		}
		e.start()
		e.push(m)
		testenv.Eventually(t, 5*time.Second, "a renewal", func() bool {
			_, renewed, _ := leaser.calls()
			return len(renewed) >= 1
		})
		if !ended {
			testenv.Eventually(t, 5*time.Second, "the lease counted lost", func() bool {
				return e.stats("acme").LeasesLost >= 1
			})
			done()
			e.waitSettled(m)
		}
		e.stop()
		if got := e.stats("acme").LeasesLost; ended && got != 0 {
			t.Errorf("job ended during the renewal: %d leases counted lost, want 0", got)
		}
	}
}

// A worker without a Waker parks jobs for a second by default: they come
// back to find their turn held.
func TestParkForWithoutWaker(t *testing.T) {
	e := setup(t)
	e.params.Leases = &fakeLeaser{}
	w, err := New(e.params)
	if err != nil {
		t.Fatal(err)
	}
	if w.caps.cfg.ParkFor != time.Second {
		t.Errorf("ParkFor %s without a Waker, want 1s", w.caps.cfg.ParkFor)
	}
	e.params.Waker = &fakeWaker{}
	if w, _ = New(e.params); w.caps.cfg.ParkFor != 10*time.Minute {
		t.Errorf("ParkFor %s with a Waker, want 10m", w.caps.cfg.ParkFor)
	}
}

// The caps a worker parked jobs under are poked until ParkFor has passed
// since it last parked one under each; a hold lasts until its time.
func TestLatestTimes(t *testing.T) {
	var p latestTimes
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	p.record("acme", t0)
	p.record("", t0.Add(time.Minute))
	p.record("", t0) // an earlier time changes nothing
	got := p.since(t0.Add(time.Second))
	if !slices.Equal(got, []string{""}) {
		t.Fatalf("since t0+1s: %v, want the fleet's cap only", got)
	}
	if got := p.since(t0); !slices.Equal(got, []string{""}) {
		t.Fatalf("acme forgotten, then since t0: %v, want the fleet's cap only", got)
	}
	if until, ok := p.after("", t0); !ok || !until.Equal(t0.Add(time.Minute)) {
		t.Fatalf("after t0: %v %v, want t0+1m", until, ok)
	}
	if _, ok := p.after("", t0.Add(time.Minute)); ok {
		t.Fatalf("a time not after now still held")
	}
	if got := p.since(t0); len(got) != 0 {
		t.Fatalf("after it passed: %v, want it forgotten", got)
	}
}

// A parked job's fallback time is twice the wait its place in line
// foretells, and 10 s, at most ParkFor; 2 minutes until a run under its
// cap was seen.
func TestParkFor(t *testing.T) {
	e := setup(t)
	e.params.Leases = &fakeLeaser{}
	e.params.Waker = &fakeWaker{}
	w, err := New(e.params)
	if err != nil {
		t.Fatal(err)
	}
	d := throttle.Decision{Outcome: throttle.Capped, Cap: 5, Ahead: 99}
	if got := w.caps.parkFor("acme", d); got != 2*time.Minute {
		t.Errorf("before any run: %s, want 2m", got)
	}
	w.caps.runtimes.add("acme", time.Second)
	w.caps.runtimes.add("acme", 6*time.Second) // mean 1 s + 5 s / 5 = 2 s
	if got := w.caps.parkFor("acme", d); got != 2*(100*2*time.Second/5)+10*time.Second {
		t.Errorf("100th in line, cap 5, runs of 2 s: %s, want 90s", got)
	}
	d.Ahead = 10_000
	if got := w.caps.parkFor("acme", d); got != 10*time.Minute {
		t.Errorf("far back in line: %s, want at most ParkFor", got)
	}
}

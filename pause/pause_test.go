package pause

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/subject"
)

// env is a NATS server with a jobs stream that binds the schedule
// subjects and allows schedules, as a worker sets it up.
type env struct {
	srv  *testenv.NATS
	js   jetstream.JetStream
	opts Options
}

const (
	testStream    = "JOBS"
	testSchedules = subject.Schedules("sched")
)

func setup(t *testing.T) *env {
	t.Helper()
	srv := testenv.StartNATS(t, "")
	nc := srv.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: testStream, Subjects: []string{"jobs.>", testSchedules.All()},
		AllowMsgSchedules: true, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, js: js, opts: Options{JetStream: js, Bucket: "pauses", Stream: testStream, Schedules: testSchedules, Settle: 50 * time.Millisecond}}
}

// watch runs a Watcher of the bucket into a new Set until the test ends,
// recording the tenants lifted.
func (e *env) watch(t *testing.T) (*Set, func() []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	kv, err := OpenBucket(ctx, e.js, e.opts.Bucket, 1)
	if err != nil {
		t.Fatal(err)
	}
	set := NewSet()
	w := NewWatcher(set, kv, slog.New(slog.DiscardHandler))
	var mu sync.Mutex
	var lifted []string
	w.OnLift = func(tenant string) { mu.Lock(); lifted = append(lifted, tenant); mu.Unlock() }
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-w.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher never read the bucket")
	}
	return set, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), lifted...) }
}

// TestPauseIsWatchedAndResumed: a pause written by Put reaches a watching
// Set within a second, with its reason and end; Get and List return it;
// Resume removes it from the Set within a second and reports the pause it
// lifted; a tenant not paused resumes without error.
func TestPauseIsWatchedAndResumed(t *testing.T) {
	e := setup(t)
	set, lifted := e.watch(t)
	ctx := context.Background()
	p, err := Put(ctx, e.opts, Request{Tenant: "acme", Reason: "abuse report 42", For: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if p.Key != "tenant.acme" || p.Until.Sub(p.Since) != time.Hour || p.Revision == 0 {
		t.Fatalf("Put returned %+v, want key tenant.acme, an hour long, a revision", p)
	}
	written := time.Now()
	testenv.Eventually(t, time.Second, "the pause applied", func() bool {
		_, _, ok := set.Paused("acme", time.Now())
		return ok
	})
	t.Logf("applied %s after the write", time.Since(written))
	if reason, until, _ := set.Paused("acme", time.Now()); reason != "abuse report 42" || !until.Equal(p.Until) {
		t.Fatalf("the Set holds reason %q until %s, want %q until %s", reason, until, "abuse report 42", p.Until)
	}
	if _, _, ok := set.Paused("acme", p.Until); ok {
		t.Fatal("the pause still holds at its until")
	}
	if _, _, ok := set.Paused("globex", time.Now()); ok {
		t.Fatal("globex is paused, never having been")
	}
	got, err := Get(ctx, e.opts, "acme")
	if err != nil || got == nil || got.Reason != p.Reason || !got.Until.Equal(p.Until) {
		t.Fatalf("Get = %+v, %v; want %+v", got, err, p)
	}
	if _, err := Put(ctx, e.opts, Request{Tenant: "globex"}); err != nil {
		t.Fatal(err)
	}
	list, err := List(ctx, e.opts)
	if err != nil || len(list) != 2 || list[0].Tenant != "acme" || list[1].Tenant != "globex" || !list[1].Until.IsZero() {
		t.Fatalf("List = %+v, %v; want acme's then globex's (no end)", list, err)
	}

	res, err := Resume(ctx, e.opts, "acme")
	if err != nil || res.Was == nil || res.Was.Reason != "abuse report 42" {
		t.Fatalf("Resume = %+v, %v; want the lifted pause", res, err)
	}
	testenv.Eventually(t, time.Second, "the resume applied", func() bool {
		_, _, ok := set.Paused("acme", time.Now())
		return !ok
	})
	if l := lifted(); len(l) != 1 || l[0] != "acme" {
		t.Fatalf("lifted %v, want [acme]", l)
	}
	if got, err := Get(ctx, e.opts, "acme"); err != nil || got != nil {
		t.Fatalf("Get after resume = %+v, %v; want nil", got, err)
	}
	res, err = Resume(ctx, e.opts, "initech")
	if err != nil || res.Was != nil {
		t.Fatalf("Resume of a tenant never paused = %+v, %v; want nothing lifted, no error", res, err)
	}
}

// TestBadRequestsAreRefusedBeforeAnyServer: a bad tenant, reason or time
// matches ErrInvalid, and nothing is written.
func TestBadRequestsAreRefusedBeforeAnyServer(t *testing.T) {
	now := time.Now()
	for _, r := range []Request{
		{Tenant: "a.b"},
		{Tenant: ""},
		{Tenant: "acme", Reason: "line\nbreak"},
		{Tenant: "acme", Until: now.Add(-time.Minute)},
		{Tenant: "acme", Until: now.Add(time.Minute), For: time.Minute},
		{Tenant: "acme", For: -time.Second},
	} {
		// No JetStream: a request that passed the checks would fail
		// otherwise.
		_, err := Put(context.Background(), Options{}, r)
		if err == nil || !errorsIsInvalid(err) {
			t.Errorf("Put(%+v) = %v, want ErrInvalid", r, err)
		}
	}
}

// TestPauseSurvivesARestart: a pause is stored durably: after the server
// restarts, a new watcher (a worker started again) reads it.
func TestPauseSurvivesARestart(t *testing.T) {
	e := setup(t)
	if _, err := Put(context.Background(), e.opts, Request{Tenant: "acme", Reason: "hold"}); err != nil {
		t.Fatal(err)
	}
	e.srv.Restart(t)
	nc := e.srv.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	e.js, e.opts.JetStream = js, js
	set, _ := e.watch(t)
	if reason, _, ok := set.Paused("acme", time.Now()); !ok || reason != "hold" {
		t.Fatalf("after a restart acme paused %v (%q), want paused (hold)", ok, reason)
	}
}


func errorsIsInvalid(err error) bool { return errors.Is(err, ErrInvalid) }

// TestEndIsDoneOnceAtTheRevisionRead: of several workers ending a pause
// whose end has come, one ends it; a pause written again since (a new
// revision) is not ended by a worker that read the old one.
func TestEndIsDoneOnceAtTheRevisionRead(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	p, err := Put(ctx, e.opts, Request{Tenant: "acme", For: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	again, err := Put(ctx, e.opts, Request{Tenant: "acme", Reason: "longer", For: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, won, err := End(ctx, e.opts, p); err != nil || won {
		t.Fatalf("End of an old revision = %v, %v; want not ended, no error", won, err)
	}
	if got, err := Get(ctx, e.opts, "acme"); err != nil || got == nil || got.Reason != "longer" {
		t.Fatalf("after End of the old revision, Get = %+v, %v; want the pause written again", got, err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, won, err := End(ctx, e.opts, again)
			if err != nil {
				t.Error(err)
			}
			if won {
				mu.Lock()
				wins++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d of 4 workers ended the pause, want 1", wins)
	}
	if got, err := Get(ctx, e.opts, "acme"); err != nil || got != nil {
		t.Fatalf("Get after End = %+v, %v; want nil", got, err)
	}
}

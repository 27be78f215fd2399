package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeHolder records the holds and releases a worker asks for; it fails
// releases with releaseErr when set.
type fakeHolder struct {
	releaseErr error

	mu       sync.Mutex
	holds    []string // "tenant until"
	heldJobs []string // the job told to wait, per hold
	releases []string // "tenant job incarnation"
}

// Hold implements Holder.
func (h *fakeHolder) Hold(_ context.Context, tenant, jobID string, until time.Time) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holds = append(h.holds, tenant+" "+until.UTC().Format(time.RFC3339))
	h.heldJobs = append(h.heldJobs, jobID)
	return nil
}

// Release implements Holder.
func (h *fakeHolder) Release(_ context.Context, tenant, jobID string, inc int64) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.releases = append(h.releases, fmt.Sprint(tenant, " ", jobID, " ", inc))
	return h.releaseErr == nil, h.releaseErr
}

func (h *fakeHolder) recorded() (holds, releases []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.holds...), append([]string(nil), h.releases...)
}

// TestRetryAfterDefersWithoutAFailure: a handler's RetryAfter (wrapped)
// holds the tenant until then, releases the job's owner record and defers
// the job through the Deferrer until then, with the reason; no failure is
// counted and nothing is dead-lettered, however often it happens. A wait
// past MaxHold is cut to MaxHold.
func TestRetryAfterDefersWithoutAFailure(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)}
	e := setup(t)
	deferrer := &fakeDeferrer{}
	holder := &fakeHolder{}
	e.params.Deferrer = deferrer
	e.params.Holder = holder
	e.params.Config.Now = clock.Now
	e.params.Config.MaxFailures = 1
	e.params.Config.MaxHold = time.Minute
	waits := []time.Duration{2 * time.Second, time.Hour}
	e.params.Handler = func(_ context.Context, job Job) error {
		return fmt.Errorf("post: %w", &RetryAfter{Until: clock.Now().Add(waits[job.Delivered-1]), Reason: "HTTP 429"})
	}
	e.start()
	m := newMsg(5, "jobs.acme")
	first := m
	e.push(m)
	e.waitSettled(m)
	clock.advance(2 * time.Second) // the first hold is over
	m = m.redelivered()
	e.push(m)
	e.waitSettled(m)
	e.stop()

	wantSettled(t, first, nakAfter(2*time.Second+time.Millisecond)) // NakDeferrer adds 1 ms
	wantSettled(t, m, nakAfter(time.Minute+time.Millisecond))
	ds := deferrer.deferred()
	if len(ds) != 2 || ds[0].Wait != 2*time.Second || ds[1].Wait != time.Minute {
		t.Fatalf("deferrals %+v, want 2s then 1m (capped)", ds)
	}
	if want := "downstream asked to wait until 2026-12-02T05:00:02Z: HTTP 429"; ds[0].Reason != want {
		t.Errorf("reason %q, want %q", ds[0].Reason, want)
	}
	holds, releases := holder.recorded()
	if strings.Join(holds, ",") != "acme 2026-12-02T05:00:02Z,acme 2026-12-02T05:01:02Z" {
		t.Errorf("holds %v", holds)
	}
	if strings.Join(releases, ",") != "acme JOBS:5 5,acme JOBS:5 5" {
		t.Errorf("releases %v", releases)
	}
	holder.mu.Lock()
	if jobs := strings.Join(holder.heldJobs, ","); jobs != "JOBS:5,JOBS:5" {
		t.Errorf("the jobs given the hold's first slot: %q, want the job told to wait each time", jobs)
	}
	holder.mu.Unlock()
	if n := len(e.failures.called()); n != 0 {
		t.Errorf("failure counter called %d times, want never", n)
	}
	if n := len(e.js.deadLetters()); n != 0 {
		t.Errorf("%d dead letters, want none", n)
	}
	if s := e.stats("acme"); s.DownstreamHolds != 2 || s.Failed != 0 {
		t.Errorf("stats %+v, want 2 downstream holds, no failure", s)
	}
}

// TestRetryAfterWithoutReleaseIsNaked: when the owner record cannot be
// given up (or there is no Holder), the job is NAK'd until then, not moved
// (a moved copy would be taken for a duplicate).
func TestRetryAfterWithoutReleaseIsNaked(t *testing.T) {
	for _, name := range []string{"no holder", "release fails"} {
		t.Run(name, func(t *testing.T) {
			clock := &fakeClock{now: time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)}
			e := setup(t)
			deferrer := &fakeDeferrer{}
			e.params.Deferrer = deferrer
			if name == "release fails" {
				e.params.Holder = &fakeHolder{releaseErr: errors.New("connection refused")}
			}
			e.params.Config.Now = clock.Now
			e.params.Handler = func(context.Context, Job) error {
				return &RetryAfter{Until: clock.Now().Add(3 * time.Second)}
			}
			e.start()
			m := newMsg(7, "jobs.acme")
			e.push(m)
			e.waitSettled(m)
			e.stop()
			wantSettled(t, m, nakAfter(3*time.Second))
			if ds := deferrer.deferred(); len(ds) != 0 {
				t.Errorf("deferrer got %+v, want nothing", ds)
			}
			if s := e.stats("acme"); s.DownstreamHolds != 1 || s.Failed != 0 {
				t.Errorf("stats %+v, want 1 downstream hold, no failure", s)
			}
		})
	}
}

// A job admitted while its tenant is held (its downstream asked to wait
// after the job was admitted) does not start: it is deferred until the
// hold ends, uncounted; another tenant's job runs.
func TestHeldTenantsAdmittedJobWaits(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)}
	e := setup(t)
	deferrer := &fakeDeferrer{}
	e.params.Deferrer = deferrer
	e.params.Holder = &fakeHolder{}
	e.params.Config.Now = clock.Now
	var ran []string
	var mu sync.Mutex
	e.params.Handler = func(_ context.Context, job Job) error {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, job.ID)
		if job.ID == "JOBS:1" {
			return &RetryAfter{Until: clock.Now().Add(3 * time.Second), Reason: "HTTP 429"}
		}
		return nil
	}
	e.start()
	first := newMsg(1, "jobs.acme")
	e.push(first)
	e.waitSettled(first)
	held, other := newMsg(2, "jobs.acme"), newMsg(3, "jobs.globex")
	e.push(held, other)
	e.waitSettled(held, other)
	clock.advance(3 * time.Second)
	after := newMsg(4, "jobs.acme")
	e.push(after)
	e.waitSettled(after)
	e.stop()

	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(ran, []string{"JOBS:1", "JOBS:3", "JOBS:4"}) {
		t.Errorf("ran %v, want JOBS:1, JOBS:3 and, after the hold, JOBS:4", ran)
	}
	wantSettled(t, held, nakAfter(3*time.Second+time.Millisecond))
	ds := deferrer.deferred()
	if len(ds) != 2 || !strings.HasPrefix(ds[1].Reason, "tenant held") {
		t.Errorf("deferrals %+v, want the 429'd job and then the held one", ds)
	}
	if s := e.stats("acme"); s.HeldBack != 1 || s.DownstreamHolds != 1 || s.Failed != 0 {
		t.Errorf("stats %+v, want 1 held back, 1 downstream hold, no failure", s)
	}
}

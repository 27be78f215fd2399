package consumer

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/throttle"
)

// A job its tenant's credits cannot cover is parked, uncharged, for
// ParkFor, with a reason that starts with header.WaitCredits (what a top-up
// finds it by) and says why; no handler runs.
func TestUnfundedJobIsParkedForATopUp(t *testing.T) {
	e := setup(t)
	deferrer := &fakeDeferrer{}
	e.params.Deferrer = deferrer
	e.params.Config.ParkFor = 90 * time.Second
	e.decider.decide = func(context.Context, throttle.Copy) throttle.Result {
		return throttle.Result{Decision: throttle.Decision{Outcome: throttle.Unfunded, Balance: 3}}
	}
	e.start()
	m := newMsg(5, "jobs.acme", "Job-Cost", "5")
	e.push(m)
	e.waitSettled(m)
	e.stop()
	ds := deferrer.deferred()
	if len(ds) != 1 || !ds[0].Park || ds[0].Wait != 90*time.Second || !strings.HasPrefix(ds[0].Reason, header.WaitCredits) ||
		!strings.Contains(ds[0].Reason, "balance 3 cannot cover cost 5") {
		t.Fatalf("deferrals %+v, want one parked for 90s waiting for credits, balance 3 against cost 5", ds)
	}
	if s := e.stats("acme"); s.CreditsWaiting != 1 || s.Admitted != 0 || s.Deferred != 0 {
		t.Errorf("stats %+v, want 1 credit wait, nothing admitted or throttle-deferred", s)
	}
	if got := e.ran.ids(); len(got) != 0 {
		t.Errorf("handled %v, want nothing", got)
	}
}

// A job held back while a top-up's released jobs go first (Wait > 0) is
// deferred by its wait, not parked; one under credits:dlq is
// dead-lettered with the reason.
func TestUnfundedJobWaitsForTheGateOrIsDeadLettered(t *testing.T) {
	e := setup(t)
	deferrer := &fakeDeferrer{}
	e.params.Deferrer = deferrer
	e.decider.decide = func(_ context.Context, cp throttle.Copy) throttle.Result {
		if cp.JobID == "JOBS:5" {
			return throttle.Result{Decision: throttle.Decision{Outcome: throttle.Unfunded, Wait: 700 * time.Millisecond}}
		}
		return throttle.Result{Decision: throttle.Decision{Outcome: throttle.Unfunded, Balance: 0, CreditsDeadLetter: true}}
	}
	e.start()
	gated, dead := newMsg(5, "jobs.acme"), newMsg(6, "jobs.acme")
	e.push(gated)
	e.waitSettled(gated)
	e.push(dead)
	e.waitSettled(dead)
	e.stop()
	ds := deferrer.deferred()
	if len(ds) != 1 || ds[0].Park || ds[0].Wait != 700*time.Millisecond || ds[0].Job.ID != "JOBS:5" {
		t.Fatalf("deferrals %+v, want JOBS:5 deferred 700ms, not parked", ds)
	}
	wantSettled(t, dead, settlement{kind: "term"})
	dls := e.js.deadLetters()
	if len(dls) != 1 || dls[0].Header.Get(header.Reason) != "credits: balance 0 cannot cover cost 1" {
		t.Fatalf("dead letters %+v, want one: credits: balance 0 cannot cover cost 1", dls)
	}
}

// A job that came while a top-up ran, when its gate is still set for a
// minute, is deferred a second at most: the gate closes a second after
// the release.
func TestUnfundedJobWaitsASecondAtMostForTheGate(t *testing.T) {
	e := setup(t)
	deferrer := &fakeDeferrer{}
	e.params.Deferrer = deferrer
	e.decider.decide = func(_ context.Context, cp throttle.Copy) throttle.Result {
		return throttle.Result{Decision: throttle.Decision{Outcome: throttle.Unfunded, Wait: throttle.CreditsGate}}
	}
	e.start()
	gated := newMsg(5, "jobs.acme")
	e.push(gated)
	e.waitSettled(gated)
	e.stop()
	if ds := deferrer.deferred(); len(ds) != 1 || ds[0].Park || ds[0].Wait != time.Second {
		t.Fatalf("deferrals %+v, want one deferred 1s, not parked", ds)
	}
}

// A copy a top-up brought back within CreditsGate is Released; one
// brought back long ago, or never, is not.
func TestReleasedByTopUp(t *testing.T) {
	now := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		header string
		want   bool
	}{
		{"", false},
		{now.Add(-time.Second).Format(time.RFC3339Nano), true},
		{now.Add(-throttle.CreditsGate - time.Second).Format(time.RFC3339Nano), false},
		{"not a time", false},
	} {
		job := Job{Header: map[string][]string{header.Released: {c.header}}}
		if c.header == "" {
			job.Header = nil
		}
		if got := releasedByTopUp(job, now); got != c.want {
			t.Errorf("released at %q: %v, want %v", c.header, got, c.want)
		}
	}
}

package throttle_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// TestReservationQueue lets 1,000 jobs (and 20 more past the horizon) arrive
// at one instant at 100/s with a burst of 10, then brings every reserved job
// back, early and then at its slot.
func TestReservationQueue(t *testing.T) {
	const (
		jobs     = 1000
		extra    = 20 // beyond the horizon
		burst    = 10
		interval = 10 * ms // one token at 100/s
		tenant   = "acme"
	)
	horizon := 10 * time.Second
	e := setup(t)
	l := newLimiter(t, e.rdb, e.prefix, horizon, throttle.Limits{throttle.PerSecond(100, burst)})
	ctx := context.Background()
	job := func(k int) string { return fmt.Sprintf("job-%04d", k) }

	// probe is a fresh job without a job id. While the bucket is in debt it
	// is never charged, so it reads the bucket's state: with the bucket
	// empty at t0+emptyAt, a job of cost 1 may run one interval later.
	probe := func(at time.Time) throttle.Request { return throttle.Request{Tenant: tenant, At: at} }
	checkProbe := func(what string, at time.Time, d throttle.Decision, emptyAt time.Duration) {
		t.Helper()
		want := limited(t0.Add(emptyAt+interval).Sub(at), 0)
		want.Binding = throttle.PerSecond(100, burst)
		if d != want {
			t.Fatalf("%s: fresh job at t0+%s: got %+v, want %+v (bucket empty at t0+%s)", what, at.Sub(t0), d, want, emptyAt)
		}
	}

	// Arrival, in one batch: the order of the batch is the arrival order.
	// Job k >= burst waits (k-burst+1) intervals; that is within the horizon
	// for k < lastReserved.
	lastReserved := burst + int(horizon/interval) - 1
	reqs := make([]throttle.Request, jobs+extra)
	for k := range reqs {
		reqs[k] = throttle.Request{Tenant: tenant, JobID: job(k), At: t0}
	}
	results := l.DecideBatch(ctx, reqs)
	slots := make(map[time.Duration]string)
	for k, r := range results {
		if r.Err != nil {
			t.Fatalf("%s: %v", job(k), r.Err)
		}
		var want throttle.Decision
		switch {
		case k < burst:
			want = admitted(int64(burst - 1 - k))
		case k <= lastReserved:
			// FIFO: each slot is exactly one interval after the previous one.
			want = reserved(time.Duration(k-burst+1) * interval)
		default:
			// Past the horizon: told to come back at the horizon, not charged.
			want = limited(horizon, 0)
		}
		sameDecision(t, job(k), r.Decision, want)
		if r.Outcome == throttle.Reserved {
			if other, dup := slots[r.Wait]; dup {
				t.Fatalf("%s and %s hold the same slot t0+%s", other, job(k), r.Wait)
			}
			slots[r.Wait] = job(k)
		}
	}
	if want := lastReserved - burst + 1; len(slots) != want {
		t.Fatalf("%d slots reserved, want %d", len(slots), want)
	}
	// The bucket was full (empty at t0-100ms) and was charged for every
	// admitted or reserved job; the jobs past the horizon added nothing.
	emptyAt := time.Duration(lastReserved+1-burst) * interval
	if emptyAt != horizon {
		t.Fatalf("test set-up: the last slot t0+%s is not at the horizon", emptyAt)
	}
	checkProbe("after arrival", t0, decide(t, l, probe(t0)), emptyAt)

	// Every reserved job comes back 5ms early (told the rest of its wait,
	// not charged), then at its slot, or 3ms after it for odd jobs
	// (admitted, not charged again). A fresh probe after each return shows
	// the bucket unchanged.
	for k := burst; k <= lastReserved; k++ {
		wait := time.Duration(k-burst+1) * interval
		slot := t0.Add(wait)
		early := slot.Add(-5 * ms)
		back := slot
		if k%2 == 1 {
			back = slot.Add(3 * ms)
		}
		rs := l.DecideBatch(ctx, []throttle.Request{
			{Tenant: tenant, JobID: job(k), At: early},
			probe(early),
			{Tenant: tenant, JobID: job(k), At: back},
			probe(back),
		})
		for i, r := range rs {
			if r.Err != nil {
				t.Fatalf("%s, request %d of its return: %v", job(k), i, r.Err)
			}
		}
		sameDecision(t, job(k)+" back 5ms early", rs[0].Decision, reserved(5*ms))
		checkProbe(job(k)+" back early", early, rs[1].Decision, emptyAt)
		if rs[2].Decision != admitted(0) {
			t.Fatalf("%s back at t0+%s (slot t0+%s): got %+v, want admitted through its slot", job(k), back.Sub(t0), wait, rs[2].Decision)
		}
		checkProbe(job(k)+" admitted at its slot", back, rs[3].Decision, emptyAt)
	}

	// A job refused past the horizon holds nothing: coming back after the
	// last slot it is a fresh job, charged and queued.
	end := t0.Add(horizon + 5*ms)
	d := decide(t, l, throttle.Request{Tenant: tenant, JobID: job(jobs + extra - 1), At: end})
	sameDecision(t, job(jobs+extra-1)+" back after the horizon", d, reserved(5*ms))
	emptyAt += interval

	// An admitted job coming back again is a fresh job and is charged.
	d = decide(t, l, throttle.Request{Tenant: tenant, JobID: job(jobs - 1), At: end})
	sameDecision(t, job(jobs-1)+" back after its admission", d, reserved(15*ms))
	emptyAt += interval
	checkProbe("after two fresh jobs", end, decide(t, l, probe(end)), emptyAt)
	// It is admitted at its new slot exactly once.
	again := end.Add(15 * ms)
	d = decide(t, l, throttle.Request{Tenant: tenant, JobID: job(jobs - 1), At: again})
	sameDecision(t, job(jobs-1)+" at its second slot", d, admitted(0))
	d = decide(t, l, throttle.Request{Tenant: tenant, JobID: job(jobs - 1), At: again})
	sameDecision(t, job(jobs-1)+" a third time", d, reserved(interval))
}

// TestFreshJobs checks Copy.Fresh. A fresh job's reservation is not read:
// one Redis read fewer than the same job not marked fresh (counted in INFO
// commandstats). A fresh job that must wait still gets its slot, and coming
// back, no longer fresh, is admitted through it uncharged. And, as
// documented, a job wrongly marked fresh while it holds a slot is charged
// again instead of being admitted through its slot.
func TestFreshJobs(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	l := newLimiter(t, e.rdb, e.prefix, 10*time.Second, throttle.Limits{throttle.PerSecond(10, 1)})
	c := newEngine(t, l)
	req := func(tenant, id string, at time.Duration, fresh bool) throttle.Copy {
		return throttle.Copy{Request: throttle.Request{Tenant: tenant, JobID: id, At: t0.Add(at)}, Fresh: fresh}
	}
	reads := func(r throttle.Copy) int {
		t.Helper()
		if err := e.rdb.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatalf("CONFIG RESETSTAT: %v", err)
		}
		decideCopy(t, c, r)
		return commandCalls(t, e.rdb, "get")
	}
	fresh, known := reads(req("a", "j1", 0, true)), reads(req("b", "j1", 0, false))
	if fresh != known-1 {
		t.Fatalf("GETs: fresh job %d, the same job not fresh %d; want one fewer", fresh, known)
	}

	// a's bucket (burst 1) is empty after j1: j2 waits one interval.
	sameDecision(t, "fresh j2 at t0", decideCopy(t, c, req("a", "j2", 0, true)),
		reserved(100*ms))
	sameDecision(t, "j2 back at its slot", decideCopy(t, c, req("a", "j2", 100*ms, false)),
		admitted(0))
	sameDecision(t, "j3 at t0+100ms", decideCopy(t, c, req("a", "j3", 100*ms, false)),
		reserved(100*ms))
	// j3 holds the slot at t0+200ms; marked fresh, it is not seen.
	sameDecision(t, "j3 wrongly fresh at its slot", decideCopy(t, c, req("a", "j3", 200*ms, true)),
		reserved(100*ms))
}

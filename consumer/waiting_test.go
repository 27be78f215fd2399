package consumer

import (
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/top"
)

// TestWaitingCountsUntilDue: at fixed times, each kind of deferral counts
// until it is due back, then drops; a parked job woken early is taken off
// by the worker it comes back to; paused jobs drop once their tenant is
// no longer paused; rates are the last 5 s; dead letters count for an
// hour; a tenant with nothing to show is forgotten.
func TestWaitingCountsUntilDue(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	w := newWaiting(100)
	job := func(seq int) Job {
		return Job{Tenant: "acme", ID: "JOBS:" + strconv.Itoa(seq), Published: t0.Add(-10 * time.Second), Header: nats.Header{}}
	}
	w.deferred(Deferral{Job: job(1), Wait: 2 * time.Second, Reason: "limit 5/s"}, t0)                                // NAK'd
	w.deferred(Deferral{Job: job(2), Wait: 30 * time.Second, Moved: true, Reason: "limit 5/s"}, t0)                  // moved
	w.deferred(Deferral{Job: job(3), Wait: time.Minute, Moved: true, Park: true, Reason: "waiting for a lease"}, t0) // parked
	w.deferred(Deferral{Job: job(4), Wait: time.Minute, Moved: true, Park: true, Paused: true, Reason: "paused: x"}, t0)
	w.deferred(Deferral{Job: job(5), Wait: time.Second, Err: fmt.Errorf("nak failed")}, t0) // unsettled: not counted
	for range 10 {
		w.admitted("acme", t0)
	}
	w.deadLettered("acme", t0)
	paused := true
	rows := func(at time.Time) map[string]top.Row {
		out := map[string]top.Row{}
		for _, r := range w.rows(at, func(string) bool { return paused }) {
			out[r.Tenant] = r
		}
		return out
	}

	r := rows(t0.Add(time.Second))["acme"]
	if r.Naked != 1 || r.Moved != 1 || r.Parked != 1 || r.Paused != 1 {
		t.Fatalf("at 1s: %+v, want one of each kind", r)
	}
	if r.Admitted != 2 || r.Deferred != 0.8 || r.DeadLetters != 1 || r.OldestWait != 11 || r.Binding != "paused: x" {
		t.Fatalf("at 1s: %+v, want 2 admitted/s, 0.8 deferred/s, 1 dead letter, oldest 11 s, held by the pause", r)
	}
	if want := []top.ParkedRun{{N: 1, Wait: 11 * time.Second}}; !reflect.DeepEqual(r.Runs, want) || r.UnparkedWait != 11 {
		t.Fatalf("at 1s: runs %+v and %gs for the others, want %+v and 11 s", r.Runs, r.UnparkedWait, want)
	}
	r = rows(t0.Add(5 * time.Second))["acme"]
	if r.Naked != 0 || r.Moved != 1 {
		t.Fatalf("at 5s: %+v, want the NAK'd job back, the moved one still away", r)
	}
	// The parked job is woken, early, onto this worker (or another).
	woken := job(3)
	woken.Header.Set(header.Woken, "1")
	woken.Header.Set(header.WaitReason, "waiting for a lease")
	woken.Header.Set(header.WaitUntil, t0.Add(time.Minute).Format(time.RFC3339Nano))
	w.arrived(woken, t0.Add(6*time.Second))
	paused = false // and acme was resumed
	r = rows(t0.Add(7 * time.Second))["acme"]
	if r.Parked != 0 || r.Paused != 0 || r.Moved != 1 || r.Admitted != 0 {
		t.Fatalf("at 7s: %+v, want the woken and the released gone, the moved one left, no admissions in the last 5 s", r)
	}
	// Both runs go to top, which nets them across workers.
	if want := []top.ParkedRun{{N: 1, Wait: 17 * time.Second}, {N: -1}}; !reflect.DeepEqual(r.Runs, want) || r.UnparkedWait != 17 {
		t.Fatalf("at 7s: runs %+v and %gs for the others, want %+v and 17 s", r.Runs, r.UnparkedWait, want)
	}
	// A wait is counted to the millisecond it ends, not rounded up.
	r = rows(t0.Add(30*time.Second - time.Millisecond))["acme"]
	if r.Moved != 1 {
		t.Fatalf("at 29.999s: %+v, want the moved job counted until 30 s", r)
	}
	r = rows(t0.Add(30 * time.Second))["acme"]
	if r.Moved != 0 || r.OldestWait != 0 {
		t.Fatalf("at 30s: %+v, want the moved job back, nothing waiting for any time", r)
	}
	r = rows(t0.Add(41 * time.Second))["acme"]
	if r.Waiting() != 0 || r.DeadLetters != 1 {
		t.Fatalf("at 41s: %+v, want nothing waiting, the dead letter still counted", r)
	}
	if _, ok := rows(t0.Add(61 * time.Minute))["acme"]; ok {
		t.Fatal("after an hour with nothing to show, acme is still kept")
	}
	if len(w.index) != 0 {
		t.Fatalf("%d tenants kept, want none", len(w.index))
	}
}

// TestWaitingSqueezesBuckets: a tenant's jobs due at more distinct times
// than it keeps buckets for are all counted, none past the last due.
func TestWaitingSqueezesBuckets(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	w := newWaiting(10)
	for i := range 50 {
		kind := Deferral{Moved: i%2 == 0, Park: i%5 == 0, Paused: i%7 == 0}
		kind.Job = Job{Tenant: "acme", Published: t0}
		kind.Wait = time.Duration(i+1) * time.Second
		w.deferred(kind, t0)
	}
	r := w.rows(t0, nil)[0]
	if r.Waiting() != 50 {
		t.Fatalf("%+v: %d waiting, want 50", r, r.Waiting())
	}
	if rs := w.rows(t0.Add(time.Hour), nil); len(rs) != 0 && rs[0].Waiting() != 0 {
		t.Fatalf("an hour later: %+v, want nothing waiting", rs)
	}
}

// BenchmarkTopAnswer100k is what one answer to throttler top costs a
// worker that knows 100,000 tenants, each with jobs waiting: its rows and
// their encoding. At one refresh a second, the share of a core it takes
// is ns/op ÷ 1e9.
func BenchmarkTopAnswer100k(b *testing.B) {
	now := time.Now()
	w := newWaiting(200_000)
	for i := range 100_000 {
		job := Job{Tenant: fmt.Sprintf("tenant-%06d", i), Published: now, Header: nats.Header{}}
		w.deferred(Deferral{Job: job, Wait: time.Minute, Moved: true, Reason: "limit 50/s:100"}, now)
		w.deferred(Deferral{Job: job, Wait: time.Second, Reason: "limit 50/s:100"}, now)
		w.admitted(job.Tenant, now)
	}
	cpu0, _ := testenv.ProcessCPU()
	n := 0
	for b.Loop() {
		chunks := 0
		e := top.NewEncoder("w", func([]byte) { chunks++ })
		w.visit(now, nil, e.Add)
		e.Finish()
		if chunks == 0 {
			b.Fatal("no reply")
		}
		n++
	}
	// CPU time, not wall time: other processes on the machine do not
	// count, the answer's garbage collection does.
	cpu1, _ := testenv.ProcessCPU()
	perAnswer := (cpu1 - cpu0) / time.Duration(n)
	b.ReportMetric(float64(perAnswer)/float64(time.Millisecond), "cpu-ms/answer")
	b.ReportMetric(100*perAnswer.Seconds(), "%core@1Hz")
}

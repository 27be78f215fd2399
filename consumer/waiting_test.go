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
	"github.com/throttler/throttler/tenant"
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
	// The run that counted it lost it here: no run is left to send top.
	if r.Runs != nil || r.OldestWait != 17 {
		t.Fatalf("at 7s: runs %+v, oldest wait %gs, want none and 17 s", r.Runs, r.OldestWait)
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

// TestWaitingForgetsATenantWhileWatched: a tenant whose jobs were all
// parked, woken back to this worker and run is forgotten once nothing of
// it is left in the rates' window, though top reads the rows every 200 ms
// meanwhile: a read is none of the tenant's doing. (Each read rolled the
// rates on to its second, which the check for a quiet tenant took for
// its last count: a tenant read more often than every 5 s was never
// forgotten, and top listed it, with nothing to show, for as long as
// anyone watched.)
func TestWaitingForgetsATenantWhileWatched(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	w := newWaiting(10)
	const jobs = 3
	parkedAt := func(i int) time.Time { return t0.Add(time.Duration(i) * 10 * time.Millisecond) }
	for i := range jobs {
		job := Job{Tenant: "acme", ID: "JOBS:" + strconv.Itoa(i), Published: t0, Header: nats.Header{}}
		w.deferred(Deferral{Job: job, Wait: 2 * time.Minute, Moved: true, Park: true, Reason: "waiting for a lease"}, parkedAt(i))
	}
	var last time.Time
	for i := range jobs {
		woken := Job{Tenant: "acme", ID: "JOBS:" + strconv.Itoa(i), Published: t0, Header: nats.Header{}}
		woken.Header.Set(header.Woken, "1")
		woken.Header.Set(header.WaitReason, "waiting for a lease")
		woken.Header.Set(header.WaitUntil, parkedAt(i).Add(2*time.Minute).Format(time.RFC3339Nano))
		last = t0.Add(time.Second + time.Duration(i)*100*time.Millisecond)
		w.arrived(woken, last)
		w.admitted("acme", last)
	}
	var gone time.Time
	for at := last.Add(100 * time.Millisecond); at.Before(t0.Add(20 * time.Second)); at = at.Add(200 * time.Millisecond) {
		rows := w.rows(at, nil)
		if len(rows) == 0 {
			gone = at
			break
		}
		if r := rows[0]; r.Waiting() != 0 || r.Runs != nil {
			t.Fatalf("at %s: %+v, want nothing waiting: every parked job came back here", at.Sub(t0), r)
		}
	}
	if gone.IsZero() {
		t.Fatalf("acme still kept %s after its last job ran, its rows read every 200 ms", t0.Add(20*time.Second).Sub(last))
	}
	if since := gone.Sub(last); since < rateSeconds*time.Second || since > (rateSeconds+2)*time.Second {
		t.Errorf("acme forgotten %s after its last job ran, want once its rates' window (%d s) is past", since, rateSeconds)
	}
	if len(w.index) != 0 {
		t.Fatalf("%d tenants kept, want none", len(w.index))
	}
}

// TestWaitingUnparksWhereItParked: jobs parked over a minute, each woken
// half a second later onto one of two workers: each one that comes back to
// its parker comes off the run that counted it, the others are counted
// off, as a negative run, by the worker they came back to, and the two
// workers' counts add up to none from then on, past the fallback times.
func TestWaitingUnparksWhereItParked(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	parker, other := newWaiting(10), newWaiting(10)
	const jobs = 60
	wokenAt := func(i int) time.Time { return t0.Add(time.Duration(i)*time.Second + 500*time.Millisecond) }
	for i := range jobs {
		at := t0.Add(time.Duration(i) * time.Second)
		job := Job{Tenant: "acme", Published: at, Header: nats.Header{}}
		parker.deferred(Deferral{Job: job, Wait: 10 * time.Minute, Moved: true, Park: true, Reason: "waiting for a lease"}, at)
		// Woken half a second later onto either worker, its copy saying
		// when its fallback was (read a few ms before the parker did).
		job.Header.Set(header.Woken, "1")
		job.Header.Set(header.WaitReason, "waiting for a lease")
		job.Header.Set(header.WaitUntil, at.Add(10*time.Minute-3*time.Millisecond).Format(time.RFC3339Nano))
		to := parker
		if i%3 == 0 {
			to = other
		}
		to.arrived(job, wokenAt(i))
	}
	sum := func(at time.Time) (parked int64) {
		for _, w := range []*waiting{parker, other} {
			for _, r := range w.rows(at, nil) {
				parked += r.Parked
			}
		}
		return parked
	}
	// The parker took its own woken jobs off its runs: it sends top no
	// negative run, only the 20 jobs the other worker counted off. (Rows
	// are read forward in time: reading one forgets what is back.)
	rows := parker.rows(wokenAt(jobs), nil)
	if len(rows) != 1 || rows[0].Parked != 20 {
		t.Fatalf("the parker's rows %+v, want acme with the 20 jobs woken elsewhere", rows)
	}
	for _, r := range rows[0].Runs {
		if r.N < 0 {
			t.Errorf("the parker sends a negative run %+v: its own woken jobs were not taken off the runs that counted them", r)
		}
	}
	for _, d := range []time.Duration{time.Minute, 5 * time.Minute, 9*time.Minute + 59*time.Second, 10*time.Minute + 30*time.Second, 11 * time.Minute} {
		if n := sum(wokenAt(jobs).Add(d)); n != 0 {
			t.Errorf("%s after the last wake: %d parked in all, want none", d, n)
		}
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

// TestWaitingCountsInvalidTenantsDeadLetters: a job without a valid
// tenant is dead-lettered under tenant.Invalid, and top counts it there,
// as /metrics and the dead-letter subject do ("" marks a free record).
func TestWaitingCountsInvalidTenantsDeadLetters(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	w := newWaiting(10)
	w.deadLettered("", t0)
	w.deadLettered("", t0)
	rows := w.rows(t0.Add(time.Second), nil)
	if len(rows) != 1 || rows[0].Tenant != tenant.Invalid || rows[0].DeadLetters != 2 {
		t.Fatalf("rows %+v, want %s with 2 dead letters", rows, tenant.Invalid)
	}
}

// TestWaitingOldestFollowsTheBacklog: a backlog published over 100 s and
// moved to slots over the next 100 s (one per second, in publish order)
// drains in that order, so once half of it is back the oldest still away
// was published about 50 s in: its wait, not the first job's, which ran
// long ago, is the oldest wait (merged buckets included).
func TestWaitingOldestFollowsTheBacklog(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	w := newWaiting(100)
	for i := range 100 {
		at := t0.Add(time.Duration(i) * time.Second)
		job := Job{Tenant: "acme", ID: "JOBS:" + strconv.Itoa(i), Published: at, Header: nats.Header{}}
		// Decided as it arrives; its slot 100 s after its publish.
		w.deferred(Deferral{Job: job, Wait: 100 * time.Second, Moved: true, Reason: "limit 1/s"}, at)
	}
	now := t0.Add(150 * time.Second) // jobs 0 to 49 are back
	var r top.Row
	for _, row := range w.rows(now, nil) {
		if row.Tenant == "acme" {
			r = row
		}
	}
	if r.Moved < 45 || r.Moved > 55 {
		t.Fatalf("at 150 s: %d moved, want about 50", r.Moved)
	}
	if r.OldestWait < 95 || r.OldestWait > 105 {
		t.Fatalf("at 150 s: oldest wait %.1f s, want about 100 (job 50's), not 150 (job 0's, back long ago)", r.OldestWait)
	}
}

package consumer

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// movedJob is one deferral of a test pattern: settled at, away for.
type movedJob struct {
	at, wait time.Duration
}

// TestWaitingMovedFollowsTheTruth: for a tenant's backlog moved in various
// patterns, the moved count follows the jobs truly away within 10% (or 2
// jobs; jobs of random waits within 20%, or 5) at every moment, and is 0
// from the moment the last is back.
func TestWaitingMovedFollowsTheTruth(t *testing.T) {
	slots := func(from, n int, every time.Duration) []time.Duration {
		var out []time.Duration
		for i := range n {
			out = append(out, time.Duration(from+i+1)*every)
		}
		return out
	}
	patterns := map[string][]movedJob{}
	// How far off the count may be: a share of the jobs truly away, or a
	// number of jobs. Jobs of random waits are the hard case, a tenant's
	// reserved slots following one another the usual one.
	tolerance := map[string][2]float64{"random": {0.2, 5}}
	// 380 jobs of a 20/s tenant, decided at once.
	for _, s := range slots(0, 380, 50*time.Millisecond) {
		patterns["backlog at once"] = append(patterns["backlog at once"], movedJob{0, s})
	}
	// The same, pulled 64 at a time every 300 ms.
	for i, s := range slots(0, 380, 50*time.Millisecond) {
		at := time.Duration(i/64) * 300 * time.Millisecond
		patterns["backlog in groups"] = append(patterns["backlog in groups"], movedJob{at, s - at})
	}
	// 100 jobs at 50/s, then one a second for a minute.
	for _, s := range slots(0, 100, 20*time.Millisecond) {
		patterns["burst then trickle"] = append(patterns["burst then trickle"], movedJob{0, s})
	}
	for i, s := range slots(2, 60, time.Second) {
		at := time.Duration(i) * time.Second
		patterns["burst then trickle"] = append(patterns["burst then trickle"], movedJob{at, s - at})
	}
	// A steady flow at 10/s, each job away 20 s, for a minute.
	for i := range 600 {
		at := time.Duration(i) * 100 * time.Millisecond
		patterns["steady"] = append(patterns["steady"], movedJob{at, 20 * time.Second})
	}
	// Jobs of random waits up to a minute, 5 a second.
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		at := time.Duration(i) * 200 * time.Millisecond
		patterns["random"] = append(patterns["random"], movedJob{at, time.Duration(rng.Int64N(int64(time.Minute)))})
	}
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	for name, jobs := range patterns {
		t.Run(name, func(t *testing.T) {
			sort.SliceStable(jobs, func(i, j int) bool { return jobs[i].at < jobs[j].at })
			w := newWaiting(10)
			tol, ok := tolerance[name]
			if !ok {
				tol = [2]float64{0.1, 2}
			}
			next, last := 0, time.Duration(0)
			for _, j := range jobs {
				last = max(last, j.at+j.wait)
			}
			for now := time.Duration(0); now <= last+time.Second; now += 100 * time.Millisecond {
				for ; next < len(jobs) && jobs[next].at <= now; next++ {
					j := jobs[next]
					w.deferred(Deferral{Job: Job{Tenant: "gamma", Published: t0, Header: nats.Header{}}, Wait: j.wait, Moved: true}, t0.Add(j.at))
				}
				truth := 0
				for _, j := range jobs[:next] {
					if j.at+j.wait > now {
						truth++
					}
				}
				var got int64
				if rs := w.rows(t0.Add(now), nil); len(rs) > 0 {
					got = rs[0].Moved
				}
				if off := abs64(float64(got - int64(truth))); off > max(tol[1], tol[0]*float64(truth)) {
					t.Fatalf("at %s: %d counted moved, %d truly away", now, got, truth)
				}
				if truth == 0 && now >= last && got != 0 {
					t.Fatalf("at %s, after the last is back: %d counted moved", now, got)
				}
			}
		})
	}
}

// TestWaitingMovedAgainCountsOnce: a job whose stay in the stream is
// capped (its slot past the copy's horizon) comes back and is moved again,
// its slot unchanged: it counts as one job all along, until its last copy
// fires, not until its slot.
func TestWaitingMovedAgainCountsOnce(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	w := newWaiting(10)
	slot := t0.Add(150 * time.Second)
	job := Job{Tenant: "gamma", Published: t0, Header: nats.Header{}}
	for at := t0; at.Before(slot); at = at.Add(time.Minute) {
		fires := at.Add(min(slot.Sub(at)-ScheduleLead, time.Minute))
		w.deferred(Deferral{Job: job, Wait: slot.Sub(at), Moved: true, FiresAt: fires}, at)
		for probe := at; probe.Before(fires); probe = probe.Add(time.Second) {
			if rs := w.rows(probe, nil); len(rs) != 1 || rs[0].Moved != 1 {
				t.Fatalf("at %s: %+v, want one job moved", probe.Sub(t0), rs)
			}
		}
	}
	// Its last deferral over 5 s before, gamma has nothing left to show:
	// forgotten, or at most a row of none.
	if rs := w.rows(slot.Add(-ScheduleLead), nil); len(rs) > 1 || len(rs) == 1 && rs[0].Moved != 0 {
		t.Fatalf("once its last copy fired: %+v, want none moved (it is in the worker)", rs)
	}
}

// TestWaitingForgetsJobsBack: jobs back before a tenant's buckets fill up
// are not merged into the jobs still away, to be counted again with them,
// even when no one read the counts in between.
func TestWaitingForgetsJobsBack(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	w := newWaiting(10)
	job := Job{Tenant: "gamma", Published: t0, Header: nats.Header{}}
	for range 50 {
		w.deferred(Deferral{Job: job, Wait: 5 * time.Second, Moved: true}, t0)
	}
	for _, wait := range []time.Duration{12, 32, 52, 72, 92} {
		w.deferred(Deferral{Job: job, Wait: wait * time.Second, Moved: true}, t0)
	}
	w.deferred(Deferral{Job: job, Wait: 150 * time.Second, Moved: true}, t0.Add(10*time.Second))
	if rs := w.rows(t0.Add(10*time.Second), nil); len(rs) != 1 || rs[0].Moved != 6 {
		t.Fatalf("at 10s: %+v, want the 6 jobs still away, not the 50 back", rs)
	}
}

// TestWaitBucketsKeepEveryJob: however the buckets are merged, at any
// moment before the first job is back every job counts, after the last
// none does, and a tenant keeps at most maxBuckets.
func TestWaitBucketsKeepEveryJob(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var tw tenantWaits
	first, last := int64(1<<62), int64(0)
	for range 1000 {
		due := 10_000 + rng.Int64N(100_000)
		first, last = min(first, due), max(last, due)
		tw.add(waitBucket{from: due, due: due, n: 1, kind: waitKind(rng.IntN(int(waitKinds))), oldest: 1}, 0)
		if tw.nb > maxBuckets {
			t.Fatalf("%d buckets", tw.nb)
		}
	}
	var before, after float64
	for _, b := range tw.buckets[:tw.nb] {
		before += b.at(first - 1)
		after += b.at(last)
	}
	if before != 1000 || after != 0 {
		t.Fatalf("%v counted before the first due, %v at the last; want 1000 and 0", before, after)
	}
}

package throttle_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// TestUnreserveDecidesAJobAnew: a job that holds a slot is admitted on it
// when it comes back, uncharged; once its slot is given up, it is charged
// at its return like a job that never held one (here: the bucket is empty,
// so it gets a new slot), and another job's slot is left alone.
func TestUnreserveDecidesAJobAnew(t *testing.T) {
	e := setup(t)
	l := newLimiter(t, e.rdb, e.prefix, time.Hour, throttle.Limits{throttle.PerSecond(1, 1)})
	c := newEngine(t, l)
	job := func(id string, inc int64, at time.Time) throttle.Copy {
		return throttle.Copy{Request: throttle.Request{Tenant: "acme", JobID: id, Cost: 1, At: at}, Incarnation: inc}
	}
	if d := decideCopy(t, c, job("JOBS:1", 1, t0)); d.Outcome != throttle.Admitted {
		t.Fatalf("the first job: %+v, want admitted", d)
	}
	for _, id := range []string{"JOBS:2", "JOBS:3"} {
		if d := decideCopy(t, c, job(id, 0, t0)); d.Outcome != throttle.Reserved {
			t.Fatalf("job %s: %+v, want a slot reserved", id, d)
		}
	}
	if err := c.Unreserve(context.Background(), []throttle.Slot{{Tenant: "acme", JobID: "JOBS:2"}}); err != nil {
		t.Fatal(err)
	}
	// Back at t0 + 2 s, when both slots (1 s and 2 s) have come: JOBS:3
	// runs on its slot, uncharged; JOBS:2 is charged, and finds the
	// bucket empty.
	at := t0.Add(2 * time.Second)
	if d := decideCopy(t, c, job("JOBS:3", 3, at)); d.Outcome != throttle.Admitted {
		t.Fatalf("JOBS:3 back at its slot: %+v, want admitted on it", d)
	}
	if d := decideCopy(t, c, job("JOBS:2", 2, at)); d.Outcome != throttle.Reserved || d.Wait <= 0 {
		t.Fatalf("JOBS:2 back after giving up its slot: %+v, want charged anew: a new slot", d)
	}
	if err := c.Unreserve(context.Background(), []throttle.Slot{{Tenant: "acme", JobID: "a b"}}); err == nil {
		t.Fatal("Unreserve of a bad job id: no error")
	}
}

// TestUnreserveGivesBackALevelPass: a paused tenant's job called in its
// turn at the global level, back while paused, gives its unused pass back
// with its charge: the level's room goes to another tenant now, and the
// job, back after the resume, takes its turn anew instead of passing at
// once on a pass from the pause.
func TestUnreserveGivesBackALevelPass(t *testing.T) {
	ctx := context.Background()
	d, s := levelDecider(t, throttle.Limits{{Rate: 100, Period: time.Second, Burst: 100}},
		throttle.LevelRules{GlobalPolicy: throttle.Policy{Limits: throttle.Limits{{Rate: 1, Period: time.Minute, Burst: 1}}}})
	job := func(n int) throttle.LevelJob {
		return throttle.LevelJob{Tenant: "pa", JobID: fmt.Sprintf("s:%d", n), Flow: "pa", Cost: 1, Weight: 1}
	}
	lvs := []throttle.Level{throttle.Global, throttle.Global}
	ds, _, _ := s.Decide(ctx, lvs, []throttle.LevelJob{job(1), job(2)})
	if !ds[0].Passed || ds[1].Passed {
		t.Fatalf("decisions %+v: want s:1 passed, s:2 queued", ds)
	}
	// s:1's token back: s:2 is called, charged, and holds a pass.
	if err := s.GiveBack(ctx, []throttle.Grant{{Level: throttle.Global, Job: job(1), Slot: time.Now(), Refund: true}}); err != nil {
		t.Fatal(err)
	}
	if ws, err := s.Poke(ctx, []throttle.Level{throttle.Global}); err != nil || len(ws) != 1 || ws[0].JobID != "s:2" {
		t.Fatalf("poke called %+v, %v; want s:2", ws, err)
	}
	if err := d.Unreserve(ctx, []throttle.Slot{{Tenant: "pa", JobID: "s:2", Cost: 1}}); err != nil {
		t.Fatal(err)
	}
	if n := passAtOnce(t, s, throttle.Global, 3); n != 1 {
		t.Fatalf("%d jobs passed the global level at once after s:2 gave its pass back, want its 1 token", n)
	}
	if got, err := d.Decide(ctx, throttle.Copy{Request: throttle.Request{Tenant: "pa", JobID: "s:2", Cost: 1}, Incarnation: 9}); err != nil || got.Outcome != throttle.Queued {
		t.Fatalf("s:2 back after the resume: %+v, %v; want queued for a turn anew, its pass gone", got, err)
	}
}

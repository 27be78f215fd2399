package throttle_test

import (
	"context"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// TestUnqueueTakesPurgedJobsOutOfALevel: a purged tenant's jobs waiting
// for their turns at the global level, on their own or as a group's, are
// taken out of the list: the next turn goes to another tenant's job, not
// to a purged one, and a job not waiting is no error.
func TestUnqueueTakesPurgedJobsOutOfALevel(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	l := newLimiter(t, e.rdb, e.prefix, time.Minute, throttle.Limits{{Rate: 1000, Period: time.Second, Burst: 1000}})
	s, err := throttle.NewShared(l, throttle.LevelRules{GlobalPolicy: throttle.Policy{Limits: throttle.Limits{{Rate: 1, Period: time.Minute, Burst: 1}}}}, throttle.SharedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	job := func(tenant, flow, id string) throttle.LevelJob {
		return throttle.LevelJob{Tenant: tenant, JobID: id, Flow: flow, Cost: 1, Weight: 1}
	}
	// qa's first job passes (the one token); its second waits on its own,
	// its third as group org's; then qc's job waits behind them.
	js := []throttle.LevelJob{job("qa", "qa", "a:1"), job("qa", "qa", "a:2"), job("qa", "org", "a:3"), job("qc", "qc", "c:1")}
	lvs := []throttle.Level{throttle.Global, throttle.Global, throttle.Global, throttle.Global}
	ds, errs, _ := s.Decide(ctx, lvs, js)
	for i, d := range ds {
		if errs[i] != nil || d.Passed != (i == 0) {
			t.Fatalf("job %d: %+v, %v; want only the first passed", i, d, errs[i])
		}
	}
	n, err := l.Unqueue(ctx, "qa", []throttle.QueuedJob{{Level: "_global", JobID: "a:2", Cost: 1}, {Level: "_global", JobID: "a:3", Cost: 1}, {Level: "_global", JobID: "a:9", Cost: 1}})
	if err != nil || n != 2 {
		t.Fatalf("Unqueue = %d, %v; want 2 taken out", n, err)
	}
	// The token back: the next turn is qc's.
	if err := s.GiveBack(ctx, []throttle.Grant{{Level: throttle.Global, Job: js[0], Slot: time.Now(), Refund: true}}); err != nil {
		t.Fatal(err)
	}
	ws, err := s.Poke(ctx, []throttle.Level{throttle.Global})
	if err != nil || len(ws) != 1 || ws[0].JobID != "c:1" {
		t.Fatalf("poke called %+v, %v; want qc's c:1, the purged jobs gone", ws, err)
	}
	if _, err := l.Unqueue(ctx, "qa", []throttle.QueuedJob{{Level: "nolevel", JobID: "a:2"}}); err == nil {
		t.Errorf("Unqueue at a level that is none: no error")
	}
}

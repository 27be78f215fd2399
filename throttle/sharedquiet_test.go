package throttle_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// TestSharedQuietFlowPassesTheFloodsNextTurns: four tenants with backlogs
// share a level in turns; a tenant with nothing waiting, whose name sorts
// after theirs, asks for one job: it passes at once (a slot within the
// direct lookahead), not queued behind each backlog's next turn, which
// its place would tie with.
func TestSharedQuietFlowPassesTheFloodsNextTurns(t *testing.T) {
	ctx := context.Background()
	s, _ := newShared(t, throttle.Limits{{Rate: 10, Period: time.Second, Burst: 1}},
		throttle.SharedOptions{Lookahead: 100 * time.Millisecond, Direct: 250 * time.Millisecond})
	var lvs []throttle.Level
	var js []throttle.LevelJob
	for i := range 20 {
		for _, f := range []string{"f1", "f2", "f3", "f4"} {
			lvs = append(lvs, throttle.Global)
			js = append(js, throttle.LevelJob{Tenant: f, JobID: fmt.Sprintf("%s:%d", f, i), Flow: f, Cost: 1, Weight: 1})
		}
	}
	if _, errs, _ := s.Decide(ctx, lvs, js); errs[0] != nil {
		t.Fatal(errs[0])
	}
	// Some turns go by: V moves on, each backlog keeps jobs in line.
	called := 0
	for deadline := time.Now().Add(5 * time.Second); called < 6 && time.Now().Before(deadline); {
		ws, err := s.Poke(ctx, []throttle.Level{throttle.Global})
		if err != nil {
			t.Fatal(err)
		}
		called += len(ws)
		time.Sleep(20 * time.Millisecond)
	}
	for i := range 3 {
		ds, errs, _ := s.Decide(ctx, []throttle.Level{throttle.Global},
			[]throttle.LevelJob{{Tenant: "zquiet", JobID: fmt.Sprintf("q:%d", i), Flow: "zquiet", Cost: 1, Weight: 1}})
		if errs[0] != nil {
			t.Fatal(errs[0])
		}
		if !ds[0].Passed || ds[0].Wait > 250*time.Millisecond {
			t.Fatalf("the quiet tenant's job %d: %+v; want it passed within 250ms, not queued behind the backlogs", i, ds[0])
		}
		// Its next job comes a second later, as a quiet tenant's does:
		// the turns of the backlogs have gone by meanwhile.
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if _, err := s.Poke(ctx, []throttle.Level{throttle.Global}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestSharedQuietFlowsArrivingTogetherGoFirst: two tenants with nothing
// waiting ask for a job each at the same moment, beside backlogs. The
// level has a slot within the direct lookahead for one of them; the
// other waits in the list, but at V, the place called last: it is the
// next job called, ahead of every backlog's next turn.
func TestSharedQuietFlowsArrivingTogetherGoFirst(t *testing.T) {
	s, _ := newShared(t, throttle.Limits{{Rate: 10, Period: time.Second, Burst: 1}},
		throttle.SharedOptions{Lookahead: 100 * time.Millisecond, Direct: 250 * time.Millisecond})
	queueGlobal(t, s, nil, 20, "f1", "f2")
	// Turns go by, and each call reserves the lookahead's slots.
	pokeUntil(t, s, nil, func(o []string) bool { return len(o) >= 4 })
	quiet := []throttle.LevelJob{
		{Tenant: "zq1", JobID: "q:1", Flow: "zq1", Cost: 1, Weight: 1},
		{Tenant: "zq2", JobID: "q:2", Flow: "zq2", Cost: 1, Weight: 1},
	}
	ds, errs, ws := s.Decide(context.Background(), []throttle.Level{throttle.Global, throttle.Global}, quiet)
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs[0], errs[1])
	}
	waiting := 0
	for i, d := range ds {
		if !d.Passed {
			waiting++
			if d.Ahead != 0 {
				t.Errorf("quiet job %d queued behind %d jobs, want none", i, d.Ahead)
			}
		}
	}
	if waiting != 1 {
		t.Fatalf("%d of the two quiet jobs waiting, want one (the terms have a slot within 250 ms for one): %+v", waiting, ds)
	}
	var order []string
	for _, w := range ws {
		order = append(order, w.Tenant)
	}
	order = pokeUntil(t, s, order, func(o []string) bool {
		return slices.ContainsFunc(o, func(t string) bool { return strings.HasPrefix(t, "zq") })
	})
	if len(order) == 0 || !strings.HasPrefix(order[0], "zq") {
		t.Errorf("the quiet job left waiting was not the next called: %v", order)
	}
}

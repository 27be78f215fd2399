package throttle_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// queueGlobal decides n jobs of each tenant at the global level, one
// tenant's after the other's, each tenant's flow its group in groups, or
// itself.
func queueGlobal(t *testing.T, s *throttle.Shared, groups map[string]string, n int, tenants ...string) {
	t.Helper()
	for k, tenant := range tenants {
		flow := tenant
		if g := groups[tenant]; g != "" {
			flow = g
		}
		lvs := make([]throttle.Level, n)
		js := make([]throttle.LevelJob, n)
		for i := range js {
			lvs[i] = throttle.Global
			js[i] = throttle.LevelJob{Tenant: tenant, JobID: fmt.Sprintf("s:%d", 1000*k+i), Flow: flow, Cost: 1, Weight: 1}
		}
		if _, errs, _ := s.Decide(context.Background(), lvs, js); errs[0] != nil {
			t.Fatal(errs[0])
		}
	}
}

// pokeUntil pokes the global level every few milliseconds until done
// says the tenants of the jobs called so far, in order (after those in
// order already), are enough, or 5 s pass; it returns them.
func pokeUntil(t *testing.T, s *throttle.Shared, order []string, done func([]string) bool) []string {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !done(order) && time.Now().Before(deadline); {
		ws, err := s.Poke(context.Background(), []throttle.Level{throttle.Global})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			order = append(order, w.Tenant)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return order
}

// orgs are the groups of the tenants of these tests.
var orgs = map[string]string{"a1": "org1", "a2": "org1", "b1": "org2"}

// TestLevelGroupsShareEvenlyWhateverTheQueueOrder: at the global level
// the groups share the limit evenly, and a group's tenants its part,
// whenever their backlogs were queued: org1's a1 queues its backlog
// while it is org1's only busy tenant, then a2 queues one, then org2's
// b1. Each group takes every other turn, and a1 and a2 org1's in turn.
func TestLevelGroupsShareEvenlyWhateverTheQueueOrder(t *testing.T) {
	s, _ := newShared(t, throttle.Limits{{Rate: 200, Period: time.Second, Burst: 1}},
		throttle.SharedOptions{Lookahead: 20 * time.Millisecond, Direct: 25 * time.Millisecond})
	queueGlobal(t, s, orgs, 40, "a1", "a2", "b1")
	const calls = 40
	order := pokeUntil(t, s, nil, func(o []string) bool { return len(o) >= calls })
	if len(order) < calls {
		t.Fatalf("%d jobs called before the deadline, want %d: %v", len(order), calls, order)
	}
	at := map[string]int{}
	for _, tenant := range order[:calls] {
		at[tenant]++
	}
	// Evenly, up to a turn of each flow: 20 each for org1 and org2, 10
	// each for a1 and a2. Shared as the backlogs were queued, org1 took
	// 25 of the 40 (a1 17, a2 8).
	if org1 := at["a1"] + at["a2"]; org1 < 19 || org1 > 21 || at["a1"] < 9 || at["a1"] > 11 || at["a2"] < 9 || at["a2"] > 11 {
		t.Errorf("the first %d calls: %v, want org1 and org2 20 each, a1 and a2 10 each: %v", calls, at, order[:calls])
	}
}

// TestQueuesCountAGroupsTenantByItsGroupsTurns: at the global level a
// tenant of a group is called at its group's turns, in the group's own
// order: Queues counts the jobs called before its first by that, not by
// where its jobs stand in the list. a2's backlog, queued after a1's, is
// called at org1's next turns, though its jobs stand behind all of a1's.
func TestQueuesCountAGroupsTenantByItsGroupsTurns(t *testing.T) {
	s, _ := newShared(t, throttle.Limits{{Rate: 100, Period: time.Second, Burst: 1}},
		throttle.SharedOptions{Lookahead: 5 * time.Millisecond, Direct: 5 * time.Millisecond})
	queueGlobal(t, s, orgs, 40, "a1", "a2", "b1")
	hs, err := s.Queues(context.Background(), "a2")
	if err != nil || len(hs) != 1 {
		t.Fatalf("Queues(a2) = %+v, %v; want the global level", hs, err)
	}
	order := pokeUntil(t, s, nil, func(o []string) bool { return slices.Contains(o, "a2") })
	first := slices.Index(order, "a2")
	if first < 0 {
		t.Fatalf("a2 not called before the deadline: %v", order)
	}
	// Up to one for a tie of places, broken by member.
	if d := hs[0].Ahead - int64(first); d < -1 || d > 1 || !hs[0].Exact {
		t.Errorf("Queues(a2): %d ahead (exact %v); %d jobs were called before its first: %v", hs[0].Ahead, hs[0].Exact, first, order)
	}
}

// TestLevelGroupsQuietTenantTakesItsGroupsNextTurn: a tenant of a group
// that asks for one job while another tenant of its group has a backlog
// is called at the group's next turn, whatever their names: a3 sorts
// after a1, whose next turn its job's place would otherwise tie with.
func TestLevelGroupsQuietTenantTakesItsGroupsNextTurn(t *testing.T) {
	s, _ := newShared(t, throttle.Limits{{Rate: 100, Period: time.Second, Burst: 1}},
		throttle.SharedOptions{Lookahead: 5 * time.Millisecond, Direct: 5 * time.Millisecond})
	queueGlobal(t, s, orgs, 40, "a1", "b1")
	pokeUntil(t, s, nil, func(o []string) bool { return len(o) >= 6 })
	ds, errs, ws := s.Decide(context.Background(), []throttle.Level{throttle.Global},
		[]throttle.LevelJob{{Tenant: "a3", JobID: "q:1", Flow: "org1", Cost: 1, Weight: 1}})
	if errs[0] != nil || ds[0].Passed {
		t.Fatalf("a3's job: %+v, %v; want it queued behind the backlogs' slots", ds[0], errs[0])
	}
	var order []string
	for _, w := range ws {
		order = append(order, w.Tenant)
	}
	order = pokeUntil(t, s, order, func(o []string) bool { return slices.Contains(o, "a3") })
	if i := slices.IndexFunc(order, func(t string) bool { return t == "a1" || t == "a3" }); i < 0 || order[i] != "a3" {
		t.Errorf("org1's next turn after a3's job came: %v, want a3's", order)
	}
}

package throttle_test

import (
	"context"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// TestLevelSettleChargesAndRefundsTheLevels: a job's cost settled after it
// ran settles its group's and the global level's terms too, once per job
// id: a job that cost 4 more leaves the levels 4 tokens fewer, one that
// cost 2 less gives 2 back, and a second settle of the same job changes
// nothing.
func TestLevelSettleChargesAndRefundsTheLevels(t *testing.T) {
	ctx := context.Background()
	d, s := levelDecider(t, throttle.Limits{{Rate: 1000, Period: time.Second, Burst: 1000}}, throttle.LevelRules{
		GlobalPolicy: throttle.Policy{Limits: throttle.Limits{{Rate: 1, Period: time.Hour, Burst: 20}}},
		Groups:       map[string]throttle.Policy{"org": {Limits: throttle.Limits{{Rate: 1, Period: time.Hour, Burst: 20}}}},
	})
	for i := 1; i <= 2; i++ {
		if got, err := d.Decide(ctx, levelCopy("acme", "org", i)); err != nil || got.Outcome != throttle.Admitted {
			t.Fatalf("job %d: %+v, %v; want admitted", i, got, err)
		}
	}
	more := throttle.Settlement{Tenant: "acme", JobID: "s:1", Charged: 1, Cost: 5, Group: "org"}
	for range 2 { // the second changes nothing
		if _, err := d.Settle(ctx, more); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Settle(ctx, throttle.Settlement{Tenant: "acme", JobID: "s:2", Charged: 3, Cost: 1, Group: "org"}); err != nil {
		t.Fatal(err)
	}
	// Each level's 20 tokens: 1 for each job when decided, 4 more for
	// s:1 once, 2 back for s:2 (reported as charged 3 and costing 1).
	for _, lv := range []throttle.Level{{Group: "org"}, throttle.Global} {
		if n := passAtOnce(t, s, lv, 20); n != 16 {
			t.Errorf("%s: %d jobs passed at once after the settles, want 16", lv, n)
		}
	}
}

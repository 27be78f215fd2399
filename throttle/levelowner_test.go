package throttle_test

import (
	"context"
	"testing"
	"time"

	"github.com/throttler/throttler/fastlane/fastcopy"
	"github.com/throttler/throttler/throttle"
)

// TestLevelWaitGivesUpOwner: a copy that a limit above its tenant makes
// wait did not run, and is carried on by another incarnation (its park or
// its move), so it gives up an owner record that names it, as a tenant's
// deferral does. Otherwise that incarnation, back in its turn, would be a
// Duplicate of one that never ran, and acked unrun: a fast lane's copy
// granted a slot ahead and moved, or an owner redelivered after its worker
// died and queued. A fresh copy has no record and costs no call.
func TestLevelWaitGivesUpOwner(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name        string
		rate        int64 // the global level's, a second, with a burst of 1
		incarnation int64
		want        throttle.Outcome
	}{
		// 10/s: the job's slot 100 ms ahead, within the direct lookahead.
		{"a fast copy granted a slot ahead", 10, fastcopy.Incarnation(2), throttle.Reserved},
		// 1/s: the job's slot 1 s ahead, past it; it waits in the list.
		{"a redelivered owner queued", 1, 5, throttle.Queued},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := setup(t)
			l := newLimiter(t, e.rdb, e.prefix, time.Minute, throttle.Limits{{Rate: 1000, Period: time.Second, Burst: 1000}})
			s, err := throttle.NewShared(l, throttle.LevelRules{GlobalPolicy: throttle.Policy{
				Limits: throttle.Limits{{Rate: tt.rate, Period: time.Second, Burst: 1}}}}, throttle.SharedOptions{})
			if err != nil {
				t.Fatal(err)
			}
			eng := newEngine(t, l)
			d := eng.Decider.WithLevels(s)
			// Another tenant's job takes the level's burst.
			if r := d.DecideBatch(ctx, []throttle.Copy{{Request: throttle.Request{Tenant: "a", JobID: "J:1"}, Incarnation: 1, Fresh: true}}); r[0].Err != nil || r[0].Outcome != throttle.Admitted {
				t.Fatalf("a's job: %+v, %v; want admitted", r[0].Decision, r[0].Err)
			}
			if ok, owner, err := eng.Owners.Claim(ctx, "b", "J:2", tt.incarnation); !ok || err != nil {
				t.Fatalf("claim: %v, owner %d, %v", ok, owner, err)
			}
			r := d.DecideBatch(ctx, []throttle.Copy{{Request: throttle.Request{Tenant: "b", JobID: "J:2"}, Incarnation: tt.incarnation}})
			if r[0].Err != nil || r[0].Outcome != tt.want || r[0].LevelName != throttle.GlobalKey {
				t.Fatalf("b's job: %+v, %v; want %v under %s", r[0].Decision, r[0].Err, tt.want, throttle.GlobalKey)
			}
			// Another incarnation may own the job now.
			if ok, owner, err := eng.Owners.Claim(ctx, "b", "J:2", 77); !ok || err != nil {
				t.Errorf("after the level's wait, the job is still owned by %d (%v): its next incarnation would be a duplicate", owner, err)
			}
		})
	}
}

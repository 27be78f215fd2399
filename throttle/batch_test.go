package throttle_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// TestBatchMatchesSequential checks the multi-job form of the script: a
// batch in which many jobs of one tenant share a call must decide exactly
// what the same requests decide one call at a time, in order. Two limiters
// with their own key prefixes replay the same random rounds; each round is
// a batch at one instant of new jobs, jobs coming back for their slots
// (early or on time), copies of moved jobs (other incarnations), the same
// job twice in one batch, new jobs marked fresh, and jobs without ids.
//
// With oneLimit every tenant has a single limit, so that a batch whose job
// ids are all different takes the script's path for the worker's call
// (one limit per job, one MGET for all reads); half of its rounds have no
// job twice, and the test checks that path ran.
func TestBatchMatchesSequential(t *testing.T) {
	for _, tc := range []struct{ owner, oneLimit bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		owner := tc.owner
		t.Run(fmt.Sprintf("owner=%v,oneLimit=%v", owner, tc.oneLimit), func(t *testing.T) {
			e := setup(t)
			mgets := commandCalls(t, e.rdb, "mget")
			limits := throttle.Limits{throttle.PerSecond(20, 4), throttle.PerMinute(300, 40)}
			if tc.oneLimit {
				limits = limits[:1]
			}
			batched := newLimiter(t, e.rdb, e.prefix+"b", 3*time.Second, limits)
			single := newLimiter(t, e.rdb, e.prefix+"s", 3*time.Second, limits)
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 7))
			now := t0
			next := 0
			var known []string // job ids handed out so far
			grouped := 0
			for round := range 60 {
				now = now.Add(time.Duration(rng.IntN(400)) * time.Millisecond)
				var reqs []throttle.Request
				inRound := map[string]bool{}
				unique := tc.oneLimit && round%2 == 0
				for range 1 + rng.IntN(40) {
					req := throttle.Request{Tenant: fmt.Sprintf("t%d", rng.IntN(3)), Cost: int64(1 + rng.IntN(3)), At: now, TrackOwner: owner}
					switch r := rng.IntN(10); {
					case r < 5 || len(known) == 0:
						req.JobID = fmt.Sprintf("j%d", next)
						req.Fresh = rng.IntN(2) == 0 // never decided: may skip the read
						known = append(known, req.JobID)
						next++
					case r < 9:
						req.JobID = known[rng.IntN(len(known))]
						if unique && inRound[req.JobID] {
							continue
						}
						if owner {
							req.Incarnation = int64(rng.IntN(2))
						}
					default:
						req.TrackOwner = false // no id, no slot
					}
					// A job id belongs to one tenant.
					if req.JobID != "" {
						inRound[req.JobID] = true
						var n int
						fmt.Sscanf(req.JobID, "j%d", &n)
						req.Tenant = fmt.Sprintf("t%d", n%3)
					}
					// Tenant t2 has one limit of its own, the others two:
					// jobs with different limits share calls.
					if req.Tenant == "t2" {
						req.Limits = throttle.Limits{throttle.PerSecond(5, 3)}
					}
					reqs = append(reqs, req)
				}
				got := batched.DecideBatch(context.Background(), reqs)
				for i, req := range reqs {
					want, werr := single.Decide(context.Background(), req)
					if (werr != nil) != (got[i].Err != nil) || want != got[i].Decision {
						t.Fatalf("round %d, request %d %+v: batch gave %+v (err %v), one at a time %+v (err %v)",
							round, i, req, got[i].Decision, got[i].Err, want, werr)
					}
				}
				grouped += len(reqs)
			}
			if grouped < 500 {
				t.Fatalf("only %d requests compared", grouped)
			}
			if n := commandCalls(t, e.rdb, "mget") - mgets; tc.oneLimit && n == 0 {
				t.Fatal("no batch took the script's one-limit path (no MGET)")
			}
		})
	}
}

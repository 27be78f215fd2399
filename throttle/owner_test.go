package throttle_test

import (
	"context"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// TestOwnerGivesUpWhenDeferredAgain follows a tracked job whose admitted
// incarnation did not run (its handler failed) and comes back: deferred
// again, it must give ownership up, or the copy its move makes would be
// taken for a duplicate and acked without ever running. An incarnation
// that is left over from an interrupted move is still a Duplicate, also
// when the move was past the horizon and nothing was reserved. Each
// step runs alone (the script's lean path) and next to another tenant's
// job (the general path).
func TestOwnerGivesUpWhenDeferredAgain(t *testing.T) {
	for _, path := range []string{"lean", "general"} {
		t.Run(path, func(t *testing.T) {
			e := setup(t)
			ctx := context.Background()
			limit := throttle.Limits{throttle.PerSecond(10, 1)} // one job per 100ms
			// step decides req, alone or in a batch with another tenant's job.
			step := func(l *throttle.Limiter, req throttle.Request) throttle.Decision {
				t.Helper()
				req.TrackOwner = true
				if path == "lean" {
					return decide(t, l, req)
				}
				res := l.DecideBatch(ctx, []throttle.Request{req, {Tenant: "other", At: req.At}})
				if res[0].Err != nil || res[1].Err != nil {
					t.Fatalf("DecideBatch: %v, %v", res[0].Err, res[1].Err)
				}
				return res[0].Decision
			}
			owner := func(tenant, id string) string {
				t.Helper()
				v, err := e.rdb.Get(ctx, e.prefix+":{"+tenant+"}:o:"+id).Result()
				if err != nil {
					return "none"
				}
				return v
			}
			l := newLimiter(t, e.rdb, e.prefix, 10*time.Second, limit)
			at := func(d time.Duration) time.Time { return t0.Add(d) }

			// Copy 1 of j is admitted and becomes the owner; its handler fails.
			sameDecision(t, "copy 1 first", step(l, throttle.Request{Tenant: "a", JobID: "j", Incarnation: 1, At: at(0)}),
				throttle.Decision{Allowed: true})
			if got := owner("a", "j"); got != "1" {
				t.Fatalf("owner after copy 1 ran: %s, want 1", got)
			}
			// Back at once, it must wait for a slot: it gives ownership up.
			sameDecision(t, "copy 1 back", step(l, throttle.Request{Tenant: "a", JobID: "j", Incarnation: 1, At: at(0)}),
				throttle.Decision{Wait: 100 * ms, Reserved: true})
			if got := owner("a", "j"); got != "none" {
				t.Fatalf("owner after copy 1 was deferred again: %s, want none", got)
			}
			// Its move made copy 2, which runs at the slot: not a duplicate.
			sameDecision(t, "copy 2 at the slot", step(l, throttle.Request{Tenant: "a", JobID: "j", Incarnation: 2, At: at(100 * ms)}),
				throttle.Decision{Allowed: true, Reserved: true})
			if got := owner("a", "j"); got != "2" {
				t.Fatalf("owner after copy 2 ran: %s, want 2", got)
			}
			// A copy 1 left over from an interrupted move is a duplicate.
			sameDecision(t, "copy 1 left over", step(l, throttle.Request{Tenant: "a", JobID: "j", Incarnation: 1, At: at(300 * ms)}),
				throttle.Decision{Duplicate: true, Owner: 2})

			// The same past the horizon, where nothing is charged.
			short := newLimiter(t, e.rdb, e.prefix, 50*time.Millisecond, limit)
			sameDecision(t, "k copy 1 first", step(short, throttle.Request{Tenant: "b", JobID: "k", Incarnation: 1, At: at(0)}),
				throttle.Decision{Allowed: true})
			sameDecision(t, "k copy 1 back", step(short, throttle.Request{Tenant: "b", JobID: "k", Incarnation: 1, At: at(0)}),
				throttle.Decision{Wait: 50 * ms})
			if got := owner("b", "k"); got != "none" {
				t.Fatalf("owner of k after it was turned away: %s, want none", got)
			}
			sameDecision(t, "k copy 2", step(short, throttle.Request{Tenant: "b", JobID: "k", Incarnation: 2, At: at(100 * ms)}),
				throttle.Decision{Allowed: true})

			// An original moved past the horizon (nothing reserved) whose ack
			// was lost comes back and is admitted by a charge: it records
			// itself, so its copy is a duplicate. A fresh original admitted
			// at once writes no record: no copy of it can exist.
			sameDecision(t, "fresh o", step(short, throttle.Request{Tenant: "d", JobID: "o", Fresh: true, At: at(0)}),
				throttle.Decision{Allowed: true})
			if got := owner("d", "o"); got != "none" {
				t.Fatalf("owner of a fresh original admitted at once: %s, want none", got)
			}
			sameDecision(t, "fresh p past the horizon", step(short, throttle.Request{Tenant: "d", JobID: "p", Fresh: true, At: at(0)}),
				throttle.Decision{Wait: 50 * ms})
			sameDecision(t, "p redelivered", step(short, throttle.Request{Tenant: "d", JobID: "p", At: at(200 * ms)}),
				throttle.Decision{Allowed: true})
			if got := owner("d", "p"); got != "0" {
				t.Fatalf("owner of p after its redelivery ran: %s, want 0", got)
			}
			sameDecision(t, "p's copy", step(short, throttle.Request{Tenant: "d", JobID: "p", Incarnation: 1, At: at(300 * ms)}),
				throttle.Decision{Duplicate: true, Owner: 0})

			// And early for a slot it holds while it owns the job.
			if err := e.rdb.Set(ctx, e.prefix+":{c}:o:m", "3", time.Minute).Err(); err != nil {
				t.Fatalf("SET owner: %v", err)
			}
			if err := e.rdb.Set(ctx, e.prefix+":{c}:j:m", t0.Add(time.Second).UnixMicro(), time.Minute).Err(); err != nil {
				t.Fatalf("SET reservation: %v", err)
			}
			sameDecision(t, "m early", step(l, throttle.Request{Tenant: "c", JobID: "m", Incarnation: 3, At: at(0)}),
				throttle.Decision{Wait: time.Second, Reserved: true})
			if got := owner("c", "m"); got != "none" {
				t.Fatalf("owner of m after it came back early: %s, want none", got)
			}
		})
	}
}

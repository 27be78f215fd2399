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
			step := func(l *throttle.Limiter, req throttle.Copy) throttle.Decision {
				t.Helper()
				c := newEngine(t, l)
				if path == "lean" {
					return decideCopy(t, c, req)
				}
				other := throttle.Copy{Request: throttle.Request{Tenant: "other", JobID: "x", At: req.At}, Fresh: true}
				res := c.DecideBatch(ctx, []throttle.Copy{req, other})
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
			sameDecision(t, "copy 1 first", step(l, throttle.Copy{Request: throttle.Request{Tenant: "a", JobID: "j", At: at(0)}, Incarnation: 1}),
				admitted(0))
			if got := owner("a", "j"); got != "1" {
				t.Fatalf("owner after copy 1 ran: %s, want 1", got)
			}
			// Back at once, it must wait for a slot: it gives ownership up.
			sameDecision(t, "copy 1 back", step(l, throttle.Copy{Request: throttle.Request{Tenant: "a", JobID: "j", At: at(0)}, Incarnation: 1}),
				reserved(100*ms))
			if got := owner("a", "j"); got != "none" {
				t.Fatalf("owner after copy 1 was deferred again: %s, want none", got)
			}
			// Its move made copy 2, which runs at the slot: not a duplicate.
			sameDecision(t, "copy 2 at the slot", step(l, throttle.Copy{Request: throttle.Request{Tenant: "a", JobID: "j", At: at(100 * ms)}, Incarnation: 2}),
				admitted(0))
			if got := owner("a", "j"); got != "2" {
				t.Fatalf("owner after copy 2 ran: %s, want 2", got)
			}
			// A copy 1 left over from an interrupted move is a duplicate.
			sameDecision(t, "copy 1 left over", step(l, throttle.Copy{Request: throttle.Request{Tenant: "a", JobID: "j", At: at(300 * ms)}, Incarnation: 1}),
				throttle.Decision{Outcome: throttle.Duplicate, Owner: 2})

			// The same past the horizon, where nothing is charged.
			short := newLimiter(t, e.rdb, e.prefix, 50*time.Millisecond, limit)
			sameDecision(t, "k copy 1 first", step(short, throttle.Copy{Request: throttle.Request{Tenant: "b", JobID: "k", At: at(0)}, Incarnation: 1}),
				admitted(0))
			sameDecision(t, "k copy 1 back", step(short, throttle.Copy{Request: throttle.Request{Tenant: "b", JobID: "k", At: at(0)}, Incarnation: 1}),
				limited(50*ms, 0))
			if got := owner("b", "k"); got != "none" {
				t.Fatalf("owner of k after it was turned away: %s, want none", got)
			}
			sameDecision(t, "k copy 2", step(short, throttle.Copy{Request: throttle.Request{Tenant: "b", JobID: "k", At: at(100 * ms)}, Incarnation: 2}),
				admitted(0))

			// An original moved past the horizon (nothing reserved) whose ack
			// was lost comes back and is admitted by a charge: it records
			// itself, so its copy is a duplicate. A fresh original admitted
			// at once writes no record: no copy of it can exist.
			sameDecision(t, "fresh o", step(short, throttle.Copy{Request: throttle.Request{Tenant: "d", JobID: "o", At: at(0)}, Fresh: true}),
				admitted(0))
			if got := owner("d", "o"); got != "none" {
				t.Fatalf("owner of a fresh original admitted at once: %s, want none", got)
			}
			sameDecision(t, "fresh p past the horizon", step(short, throttle.Copy{Request: throttle.Request{Tenant: "d", JobID: "p", At: at(0)}, Fresh: true}),
				limited(50*ms, 0))
			sameDecision(t, "p redelivered", step(short, throttle.Copy{Request: throttle.Request{Tenant: "d", JobID: "p", At: at(200 * ms)}}),
				admitted(0))
			if got := owner("d", "p"); got != "0" {
				t.Fatalf("owner of p after its redelivery ran: %s, want 0", got)
			}
			sameDecision(t, "p's copy", step(short, throttle.Copy{Request: throttle.Request{Tenant: "d", JobID: "p", At: at(300 * ms)}, Incarnation: 1}),
				throttle.Decision{Outcome: throttle.Duplicate, Owner: 0})

			// And early for a slot it holds while it owns the job.
			if err := e.rdb.Set(ctx, e.prefix+":{c}:o:m", "3", time.Minute).Err(); err != nil {
				t.Fatalf("SET owner: %v", err)
			}
			if err := e.rdb.Set(ctx, e.prefix+":{c}:j:m", reservationValue(t0.Add(time.Second), limit), time.Minute).Err(); err != nil {
				t.Fatalf("SET reservation: %v", err)
			}
			sameDecision(t, "m early", step(l, throttle.Copy{Request: throttle.Request{Tenant: "c", JobID: "m", At: at(0)}, Incarnation: 3}),
				reserved(time.Second))
			if got := owner("c", "m"); got != "none" {
				t.Fatalf("owner of m after it came back early: %s, want none", got)
			}
		})
	}
}

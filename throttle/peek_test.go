package throttle_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// dumpAll returns every key of prefix with its DUMP and whether it has a
// TTL: what Peek must leave byte for byte as it found it.
func dumpAll(t *testing.T, e env) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, k := range keys(t, e.rdb, e.prefix) {
		d, err := e.rdb.Dump(ctx, k).Result()
		if err != nil {
			t.Fatalf("DUMP %s: %v", k, err)
		}
		ttl, err := e.rdb.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatalf("PTTL %s: %v", k, err)
		}
		out[k] = fmt.Sprintf("%q ttl=%v", d, ttl > 0)
	}
	return out
}

// Peek finds the buckets as the next decision does: the wait it reports
// is the wait the next job gets, set by the same limit, and it writes
// nothing.
func TestPeekSeesWhatTheNextDecisionSees(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	perSec, perMin := throttle.PerSecond(10, 5), throttle.PerMinute(20, 8)
	l, live := newLiveLimiter(t, e, time.Hour, throttle.Enforce(perSec, perMin))
	c := newEngine(t, l)
	for i := range 7 {
		decide(t, l, throttle.Request{Tenant: "acme", JobID: fmt.Sprint("a", i), At: t0})
	}
	if _, _, err := c.Failed(ctx, "acme", "a3", 1, 5); err != nil {
		t.Fatal(err)
	}
	check := func(what string, at time.Time) {
		t.Helper()
		before := dumpAll(t, e)
		s, err := l.Peek(ctx, "acme", at)
		if err != nil {
			t.Fatalf("%s: Peek: %v", what, err)
		}
		if after := dumpAll(t, e); !reflect.DeepEqual(before, after) {
			t.Fatalf("%s: Peek wrote:\nbefore %v\nafter  %v", what, before, after)
		}
		d := decide(t, l, throttle.Request{Tenant: "acme", JobID: "probe-" + what, At: at})
		if d.Wait != s.Wait || (d.Wait > 0 && d.Binding != s.Binding) {
			t.Fatalf("%s: Peek says wait %s (by %v), the next job got %+v", what, s.Wait, s.Binding, d)
		}
		t.Logf("%s: %+v", what, s)
	}
	check("in-debt", t0)
	check("later", t0.Add(700*time.Millisecond))

	s, err := l.Peek(ctx, "acme", t0.Add(700*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// 7 jobs at t0 (2 reserved) and two probes, both reserved; a3's
	// handler failed once.
	if s.Reserved != 4 || !reflect.DeepEqual(s.Failures, map[string]int64{"a3": 1}) {
		t.Fatalf("Reserved %d, Failures %v; want 4 and a3 failed once", s.Reserved, s.Failures)
	}

	// A lowered limit: Peek carries the state over as the decision will.
	live.set(throttle.Enforce(throttle.PerSecond(2, 5), perMin))
	at := t0.Add(3 * time.Second)
	s, err = l.Peek(ctx, "acme", at)
	if err != nil {
		t.Fatal(err)
	}
	if s.Buckets[0].StoredRate != 10 {
		t.Fatalf("after the change: %+v, want the state noted as stored for 10/s", s.Buckets[0])
	}
	check("after-a-change", at)
}

// A tenant with nothing stored has full buckets and no wait.
func TestPeekOfAnIdleTenant(t *testing.T) {
	e := setup(t)
	l := newLimiter(t, e.rdb, e.prefix, time.Hour, throttle.Limits{throttle.PerSecond(10, 5)})
	s, err := l.Peek(context.Background(), "idle", t0)
	if err != nil {
		t.Fatal(err)
	}
	b := s.Buckets[0]
	if s.Wait != 0 || b.Stored || b.Tokens != 5 || !b.FullAt.Equal(t0) || s.Reserved != 0 || s.Failures != nil {
		t.Fatalf("idle tenant: %+v", s)
	}
}

// x/time/rate's TestReserveSetLimit, replayed at its times: 5/s with a
// burst of 2; two jobs of cost 2 at t0 (the second waits 400 ms, so the
// bucket is in debt); the limit changes at t2. The engine forgives the
// debt (the bucket is empty from the change on, and the job holding its
// slot is decided again when it comes back), so a job of cost 1 at t2
// waits one token of the new rate. Peek must say so: it used to keep the
// old empty time, and reported -2 tokens and 300 ms where the engine
// decided 100 ms.
func TestPeekAfterARateChangeInDebt(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	for _, tc := range []struct {
		tenant string
		rate   int64
		wait   time.Duration
	}{
		{"raised", 10, in(100 * ms)}, // TestReserveSetLimit's SetLimitAt(t2, 10)
		{"lowered", 2, in(500 * ms)},
	} {
		l, live := newLiveLimiter(t, e, time.Hour, throttle.Enforce(per(5, 2)))
		sameDecision(t, tc.tenant+": first job", decide(t, l, throttle.Request{Tenant: tc.tenant, JobID: "a", Cost: 2, At: t0}), admitted(0))
		sameDecision(t, tc.tenant+": second job", decide(t, l, throttle.Request{Tenant: tc.tenant, JobID: "b", Cost: 2, At: t0}), reserved(in(400*ms)))
		live.set(throttle.Enforce(per(tc.rate, 2)))
		t2 := t0.Add(in(200 * ms))
		s, err := l.Peek(ctx, tc.tenant, t2)
		if err != nil {
			t.Fatal(err)
		}
		b := s.Buckets[0]
		fill := in(time.Second) * 2 / time.Duration(tc.rate)
		if s.Wait != tc.wait || b.Wait != tc.wait || b.Tokens != 0 || b.StoredRate != 5 || !b.ReservedUntil.IsZero() || !b.FullAt.Equal(t2.Add(fill)) {
			t.Fatalf("%s to %d: Peek at t2 gives %+v, want an empty bucket (0 tokens, full at t2+%s, nothing reserved) and a wait of %s", tc.tenant, tc.rate, s, fill, tc.wait)
		}
		d := decide(t, l, throttle.Request{Tenant: tc.tenant, JobID: "c", At: t2})
		sameDecision(t, tc.tenant+": a job of cost 1 at t2", d, reserved(tc.wait))
	}
}

// A cap's counts say what the next call decides. A called job whose place
// expired is in line again: the next call puts it back, so a newcomer
// waits behind it (Peek used to count only the list, and inspect said the
// newcomer would run). And jobs in line do not make a newcomer wait when
// there is room for them all: leases that expired unseen leave room, and
// the next call admits the newcomer and calls the line (inspect used to
// say any job in line made it wait).
func TestPeekCapCountsAsTheNextCallFinds(t *testing.T) {
	ctx := context.Background()
	peekCap := func(t *testing.T, ce *capEnv) *throttle.CapSnapshot {
		t.Helper()
		s, err := ce.l.Peek(ctx, "acme", ce.now)
		if err != nil {
			t.Fatal(err)
		}
		return s.Cap
	}
	t.Run("a called job not back in time is in line", func(t *testing.T) {
		ce := newCapEnv(t, throttle.Rules{Default: throttle.Policy{Running: 1}}, throttle.CapOptions{CallTTL: time.Second})
		j1 := ce.job(t, "acme", "j1")
		wantOutcome(t, "j2", ce.job(t, "acme", "j2"), throttle.Capped)
		if woke := ce.finish(t, j1); !slices.Equal(woke, []string{"j2"}) {
			t.Fatalf("woke %v, want [j2]", woke)
		}
		ce.now = t0.Add(2 * time.Second) // j2's call expired
		c := peekCap(t, ce)
		if *c != (throttle.CapSnapshot{Waiting: 1, Ahead: 1}) || !c.Full(1) {
			t.Fatalf("after j2's call expired: %+v, want j2 in line ahead of a newcomer, the cap full", *c)
		}
		if j3 := ce.job(t, "acme", "j3"); j3.Outcome != throttle.Capped || j3.Ahead != 1 || j3.Running != 0 {
			t.Fatalf("j3: %+v, want capped behind j2", j3.Decision)
		}
	})
	t.Run("room past the line", func(t *testing.T) {
		ce := newCapEnv(t, throttle.Rules{Default: throttle.Policy{Running: 2}}, throttle.CapOptions{LeaseTTL: time.Second})
		ce.job(t, "acme", "j1")
		ce.job(t, "acme", "j2")
		wantOutcome(t, "j3", ce.job(t, "acme", "j3"), throttle.Capped)
		ce.now = t0.Add(2 * time.Second) // j1's and j2's leases expired, unseen
		c := peekCap(t, ce)
		if *c != (throttle.CapSnapshot{Waiting: 1, Ahead: 1}) || c.Full(2) {
			t.Fatalf("after the leases expired: %+v, want j3 in line and room for a newcomer too", *c)
		}
		j4 := ce.job(t, "acme", "j4")
		if j4.Outcome != throttle.Admitted || !slices.Equal(ids(j4.Wake), []string{"j3"}) {
			t.Fatalf("j4: %+v, woke %v; want admitted, j3 called", j4.Decision, ids(j4.Wake))
		}
	})
}

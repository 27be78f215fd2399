package throttle_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// A limit whose period changes carries the tokens its bucket holds over to
// the new bucket, at most the new burst, so the change grants nothing; a
// bucket in debt carries none.
func TestCarryToAnotherPeriod(t *testing.T) {
	ctx := context.Background()
	// Per minute and per hour, so that no bucket expires by Redis's clock
	// while a slow machine runs the test (its requests carry fixed times).
	perMinute := throttle.Enforce(throttle.PerMinute(10, 10))
	perHour := throttle.Enforce(throttle.PerHour(600, 10)) // 10/min too, an hour's bucket
	admittedAt := func(l *throttle.Limiter, prefix string, n int, at time.Time) int {
		t.Helper()
		got := 0
		for i := range n {
			if decide(t, l, throttle.Request{Tenant: "acme", JobID: fmt.Sprint(prefix, i), At: at}).Outcome == throttle.Admitted {
				got++
			}
		}
		return got
	}

	t.Run("tokens carried", func(t *testing.T) {
		e := setup(t)
		l, live := newLiveLimiter(t, e, time.Hour, perMinute)
		if n := admittedAt(l, "a", 4, t0); n != 4 {
			t.Fatalf("%d of 4 admitted under 10/min:10", n)
		}
		if err := l.Carry(ctx, "acme", perMinute, perHour, t0); err != nil {
			t.Fatalf("Carry: %v", err)
		}
		live.set(perHour)
		// 6 tokens carried: 6 admitted, the 7th waits 6 s (600/h).
		if n := admittedAt(l, "b", 6, t0); n != 6 {
			t.Fatalf("%d of 6 admitted after the change, want the 6 carried", n)
		}
		sameDecision(t, "the 7th", decide(t, l, throttle.Request{Tenant: "acme", JobID: "b6", At: t0}),
			throttle.Decision{Outcome: throttle.Reserved, Wait: 6 * time.Second, Binding: throttle.PerHour(600, 10)})
		// Carried again (another worker): nothing changes.
		if err := l.Carry(ctx, "acme", perMinute, perHour, t0); err != nil {
			t.Fatalf("Carry again: %v", err)
		}
		sameDecision(t, "the 8th", decide(t, l, throttle.Request{Tenant: "acme", JobID: "b7", At: t0}),
			throttle.Decision{Outcome: throttle.Reserved, Wait: 12 * time.Second, Binding: throttle.PerHour(600, 10)})
	})

	t.Run("debt carries nothing", func(t *testing.T) {
		e := setup(t)
		l, live := newLiveLimiter(t, e, time.Hour, perMinute)
		admittedAt(l, "a", 15, t0) // 10 admitted, 5 hold slots
		if err := l.Carry(ctx, "acme", perMinute, perHour, t0); err != nil {
			t.Fatalf("Carry: %v", err)
		}
		live.set(perHour)
		sameDecision(t, "first job after the change", decide(t, l, throttle.Request{Tenant: "acme", JobID: "b0", At: t0}),
			throttle.Decision{Outcome: throttle.Reserved, Wait: 6 * time.Second, Binding: throttle.PerHour(600, 10)})
	})

	t.Run("without Carry a new period is a fresh bucket", func(t *testing.T) {
		e := setup(t)
		l, live := newLiveLimiter(t, e, time.Hour, perMinute)
		admittedAt(l, "a", 10, t0)
		live.set(perHour)
		if n := admittedAt(l, "b", 10, t0); n != 10 {
			t.Fatalf("%d admitted: the comparison this test makes is gone", n)
		}
	})

	t.Run("shadow and enforced are not carried into each other", func(t *testing.T) {
		e := setup(t)
		l, live := newLiveLimiter(t, e, time.Hour, perMinute)
		admittedAt(l, "a", 10, t0)
		shadow := perHour
		shadow.Shadow = true
		if err := l.Carry(ctx, "acme", perMinute, shadow, t0); err != nil {
			t.Fatalf("Carry: %v", err)
		}
		if ks := keys(t, e.rdb, e.prefix+":{acme}:s:"); len(ks) != 0 {
			t.Fatalf("Carry into shadow wrote %v", ks)
		}
		live.set(perHour)
	})
}

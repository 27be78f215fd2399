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

// A limit dropped while its bucket is in debt (a rate replaced by a sliding
// window) and then set again does not charge the tenant a second time for
// the jobs whose slots it held, which were decided again meanwhile: Carry
// forgave the dropped bucket's debt. Nor do those slots come back to life:
// one of them, back after the limit returned, is decided again.
func TestADroppedLimitComesBackWithoutItsDebt(t *testing.T) {
	ctx := context.Background()
	perMinute := throttle.Enforce(throttle.PerMinute(10, 10))
	window := throttle.Enforce(throttle.SlidingWindow(1000, time.Minute))
	e := setup(t)
	l, live := newLiveLimiter(t, e, time.Hour, perMinute)
	for i := range 40 { // 10 admitted, 30 hold slots: 3 minutes of debt
		decide(t, l, throttle.Request{Tenant: "acme", JobID: fmt.Sprint("a", i), At: t0})
	}
	if err := l.Carry(ctx, "acme", perMinute, window, t0); err != nil {
		t.Fatalf("Carry to the window: %v", err)
	}
	live.set(window)
	at := t0.Add(6 * time.Second) // a token's worth of time under 10/min
	if err := l.Carry(ctx, "acme", window, perMinute, at); err != nil {
		t.Fatalf("Carry back: %v", err)
	}
	live.set(perMinute)
	sameDecision(t, "a new job once 10/min is back", decide(t, l, throttle.Request{Tenant: "acme", JobID: "b0", At: at}),
		throttle.Decision{Outcome: throttle.Admitted})
	// a39's slot, the last, was at t0 + 3 min: back then, it is charged
	// (the bucket, full again, holds 10), leaving 9 for new jobs; run on a
	// revived slot it would leave 10.
	late := t0.Add(3 * time.Minute)
	decide(t, l, throttle.Request{Tenant: "acme", JobID: "a39", At: late})
	admitted := 0
	for i := range 10 {
		if decide(t, l, throttle.Request{Tenant: "acme", JobID: fmt.Sprint("c", i), At: late}).Outcome == throttle.Admitted {
			admitted++
		}
	}
	if admitted != 9 {
		t.Fatalf("%d of 10 new jobs admitted beside a39 back at its old slot, want 9: its slot was revived", admitted)
	}
}

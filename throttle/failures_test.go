package throttle_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// TestFailureCounterReleasesTheOwner: a failed incarnation that owns its job
// gives the owner record up while the job is still to be retried, so the
// copy a move of the retry makes may run (otherwise it would be taken for a
// duplicate and never run); at the give-up count, or when the record names
// another incarnation, the record stays.
func TestFailureCounterReleasesTheOwner(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	fc, err := throttle.NewFailureCounter(e.rdb, e.prefix, time.Hour)
	if err != nil {
		t.Fatalf("NewFailureCounter: %v", err)
	}
	l := newLimiter(t, e.rdb, e.prefix, 10*time.Second, throttle.Limits{throttle.PerSecond(1000, 1000)})
	c := newEngine(t, l)
	ownerKey := e.prefix + ":{a}:o:j"
	owner := func() string {
		t.Helper()
		v, err := e.rdb.Get(ctx, ownerKey).Result()
		if err != nil {
			return "none"
		}
		return v
	}
	admit := func(inc int64) {
		t.Helper()
		// Remaining depends on the time between calls (the bucket refills
		// a token per ms): only the outcome is compared.
		if d := decideCopy(t, c, throttle.Copy{Request: throttle.Request{Tenant: "a", JobID: "j"}, Incarnation: inc}); d.Outcome != throttle.Admitted {
			t.Fatalf("incarnation %d: %+v, want allowed", inc, d)
		}
	}
	fail := func(inc int64, wantN int64, wantReleased bool) {
		t.Helper()
		n, released, err := c.Failed(ctx, "a", "j", inc, 3)
		if err != nil || n != wantN || released != wantReleased {
			t.Fatalf("Failed(%d) = %d, %v, %v; want %d, %v", inc, n, released, err, wantN, wantReleased)
		}
	}

	admit(7) // copy 7 runs and owns the job
	if got := owner(); got != "7" {
		t.Fatalf("owner %s, want 7", got)
	}
	fail(8, 1, false) // another incarnation's failure leaves the record alone
	if got := owner(); got != "7" {
		t.Fatalf("owner after incarnation 8 failed: %s, want 7", got)
	}
	fail(7, 2, true) // the owner failed: released
	if got := owner(); got != "none" {
		t.Fatalf("owner after the owner failed: %s, want none", got)
	}
	admit(9)          // the retry's copy runs: not a duplicate
	fail(9, 3, false) // the give-up count: kept
	if got := owner(); got != "9" {
		t.Fatalf("owner after the last failure: %s, want 9", got)
	}

	// Incr alone counts, and touches no owner record.
	if n, err := fc.Incr(ctx, "a", "j"); err != nil || n != 4 {
		t.Fatalf("Incr = %d, %v; want 4", n, err)
	}
	if got := owner(); got != "9" {
		t.Fatalf("owner after Incr: %s, want 9", got)
	}

	// Bad arguments are refused before anything is written.
	for _, tc := range []struct {
		inc, giveUpAt int64
		code          throttle.Code
	}{
		{-1, 3, throttle.CodeIncarnation},
		{1 << 53, 3, throttle.CodeIncarnation},
		{1, 0, throttle.CodeGiveUp},
		{1, 1_000_001, throttle.CodeGiveUp},
	} {
		_, _, err := c.Failed(ctx, "a", "k", tc.inc, tc.giveUpAt)
		var inv *throttle.InvalidError
		if !errors.As(err, &inv) || inv.Code != tc.code {
			t.Errorf("Failed(%d, %d): %v, want code %v", tc.inc, tc.giveUpAt, err, tc.code)
		}
	}
	if n, err := e.rdb.Exists(ctx, e.prefix+":{a}:f:k").Result(); err != nil || n != 0 {
		t.Errorf("a refused call wrote its counter: exists %d, %v", n, err)
	}
	// A stored counter that is not a whole number is refused, as is a
	// call whose arguments do not fit its keys (checked in the script).
	if err := e.rdb.Set(ctx, e.prefix+":{a}:f:bad", "x", time.Minute).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if _, _, err := c.Failed(ctx, "a", "bad", 1, 3); !errors.As(err, new(*throttle.InvalidError)) {
		t.Errorf("malformed counter: %v, want InvalidError", err)
	}
}

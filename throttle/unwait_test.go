package throttle_test

import (
	"context"
	"slices"
	"testing"

	"github.com/throttler/throttler/throttle"
)

// TestUnwait: jobs purged from a tenant's waiting list, and from the
// fleet's, lose their places; the others keep theirs, in order, and a
// freed lease calls the next one still waiting.
func TestUnwait(t *testing.T) {
	ce := newCapEnv(t, throttle.Rules{Default: throttle.Policy{Running: 1}}, throttle.CapOptions{MaxRunning: 2})
	ctx := context.Background()
	run := ce.job(t, "acme", "j1")
	wantOutcome(t, "j1", run, throttle.Admitted)
	for _, id := range []string{"j2", "j3", "j4"} {
		wantOutcome(t, id, ce.job(t, "acme", id), throttle.Capped) // acme's cap is full
	}
	wantOutcome(t, "g1", ce.job(t, "globex", "g1"), throttle.Admitted)
	wantOutcome(t, "g2", ce.job(t, "globex", "g2"), throttle.Capped) // the fleet's cap is full

	n, err := ce.l.Unwait(ctx, "acme", []string{"j2", "j3", "j9"})
	if err != nil || n != 2 {
		t.Fatalf("Unwait = %d, %v; want 2 places removed", n, err)
	}
	snap, err := ce.l.Peek(ctx, "acme", ce.now)
	if err != nil || snap.Cap.Waiting != 1 {
		t.Fatalf("acme's cap after Unwait: %+v, %v; want 1 waiting", snap.Cap, err)
	}
	if n, err := ce.l.Unwait(ctx, "globex", []string{"g2"}); err != nil || n != 1 {
		t.Fatalf("Unwait of globex's job in the fleet's list = %d, %v; want 1", n, err)
	}
	fleet, err := ce.l.PeekFleet(ctx, ce.now)
	if err != nil || fleet.Waiting != 0 {
		t.Errorf("the fleet's cap after Unwait: %+v, %v; want none waiting", fleet, err)
	}
	if woke := ce.finish(t, run); !slices.Equal(woke, []string{"j4"}) {
		t.Errorf("j1 done woke %v, want [j4]: the purged jobs' places are gone", woke)
	}
}

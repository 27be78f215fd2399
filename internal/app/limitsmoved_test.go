package app

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

// bringCall is one call of a movedBringer's bring.
type bringCall struct {
	tenant string
	to     throttle.Policy
	now    time.Time
}

// recordedBringer is a running movedBringer with a short wait and no
// spread, whose bring records its calls and answers n, err, and whose
// worker, started longer than the horizon ago, moved the jobs of the
// tenants in moved (nil: it cannot tell).
func recordedBringer(t *testing.T, n int, err error, moved map[string]bool, log *testenv.Buffer) (*movedBringer, func() []bringCall) {
	var mu sync.Mutex
	var calls []bringCall
	b := newMovedBringer(func(_ context.Context, tenant string, to throttle.Policy, now time.Time) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, bringCall{tenant, to, now})
		return n, err
	}, func() (map[string]bool, bool) { return moved, moved != nil }, 10*time.Minute, slog.New(slog.NewTextHandler(log, nil)))
	b.after, b.spread = 50*time.Millisecond, 0
	b.started = time.Now().Add(-time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return b, func() []bringCall {
		mu.Lock()
		defer mu.Unlock()
		return append([]bringCall(nil), calls...)
	}
}

// TestMovedBringerPassesOnceAfterTheLastChange: a change makes one pass,
// after the bringer's wait, under the new limits; changes in quick
// succession make one pass, under the last; another tenant's change its
// own.
func TestMovedBringerPassesOnceAfterTheLastChange(t *testing.T) {
	var log testenv.Buffer
	b, calls := recordedBringer(t, 12, nil, nil, &log)
	ctx := context.Background()

	start := time.Now()
	to := throttle.Enforce(throttle.PerSecond(40, 40))
	b.changed(ctx, "acme", to)
	testenv.Eventually(t, 5*time.Second, "acme's pass", func() bool { return len(calls()) == 1 })
	c := calls()[0]
	if c.tenant != "acme" || c.to.String() != to.String() || c.now.Sub(start) < b.after {
		t.Fatalf("pass %+v, %s after the change; want acme's to %s, after %s", c, c.now.Sub(start), to, b.after)
	}
	testenv.Eventually(t, 5*time.Second, "the 12 jobs brought back logged", func() bool {
		return strings.Contains(log.String(), "brought_back=12")
	})

	b.after = 500 * time.Millisecond // well over the 10 ms between changes, however loaded
	var last time.Time
	for i := range 5 {
		last = time.Now()
		b.changed(ctx, "globex", throttle.Enforce(throttle.PerSecond(int64(i+1), 10)))
		time.Sleep(10 * time.Millisecond) // changes closer together than the wait
	}
	b.changed(ctx, "initech", throttle.Policy{})
	testenv.Eventually(t, 5*time.Second, "globex's and initech's passes", func() bool { return len(calls()) == 3 })
	for _, c := range calls()[1:] {
		if c.tenant == "globex" && (c.now.Sub(last) < b.after || c.to.String() != "5/s:10") {
			t.Fatalf("globex's pass %s after its last change, to %s; want after %s, to the last limits, 5/s:10", c.now.Sub(last), c.to, b.after)
		}
	}
	// Any further pass of globex would come before this one.
	b.changed(ctx, "acme", to)
	testenv.Eventually(t, 5*time.Second, "acme's second pass", func() bool { return len(calls()) == 4 })
	if got := calls(); got[3].tenant != "acme" {
		t.Fatalf("fourth pass %+v, want acme's; all: %+v", got[3], got)
	}
}

// TestMovedBringerPassesOverTenantsNotMoved: a worker makes no pass for a
// tenant it moved no job of, so that a change of many tenants at once
// costs nothing for those without a backlog.
func TestMovedBringerPassesOverTenantsNotMoved(t *testing.T) {
	var log testenv.Buffer
	b, calls := recordedBringer(t, 0, nil, map[string]bool{"acme": true}, &log)
	ctx := context.Background()
	b.changed(ctx, "globex", throttle.Policy{})
	b.changed(ctx, "initech", throttle.Policy{})
	b.changed(ctx, "acme", throttle.Policy{})
	testenv.Eventually(t, 5*time.Second, "acme's pass", func() bool { return len(calls()) >= 1 })
	// Passes run in the order they fall due: globex's and initech's, due
	// first, would have come before.
	b.changed(ctx, "acme", throttle.Policy{})
	testenv.Eventually(t, 5*time.Second, "acme's second pass", func() bool { return len(calls()) >= 2 })
	for _, c := range calls() {
		if c.tenant != "acme" {
			t.Fatalf("passes %+v: want acme's only", calls())
		}
	}
}

// TestMovedBringerLogsAFailure: a pass that fails is logged as a warning,
// saying the jobs come back at their slots.
func TestMovedBringerLogsAFailure(t *testing.T) {
	var log testenv.Buffer
	b, calls := recordedBringer(t, 0, errors.New("no responders"), nil, &log)
	b.changed(context.Background(), "acme", throttle.Policy{})
	testenv.Eventually(t, 5*time.Second, "the failure logged", func() bool {
		return len(calls()) == 1 && strings.Contains(log.String(), "they come back at their slots")
	})
}

// TestMovedBringerPassesChangesMadeBeforeItStarted: a tenant whose limits
// were written less than the horizon before the worker started gets a
// pass whatever the worker moved (the jobs moved under the old limits
// were moved by workers since stopped, or wait since the fleet was down);
// one written longer ago gets none.
func TestMovedBringerPassesChangesMadeBeforeItStarted(t *testing.T) {
	var log testenv.Buffer
	b, calls := recordedBringer(t, 0, nil, map[string]bool{}, &log)
	ctx := context.Background()
	b.loaded(ctx, "hooli", throttle.Policy{}, time.Now().Add(-time.Hour))
	b.loaded(ctx, "initech", throttle.Policy{}, time.Now().Add(-time.Minute))
	testenv.Eventually(t, 5*time.Second, "initech's pass", func() bool { return len(calls()) >= 1 })
	// hooli's pass, due as soon, would have come before this one.
	b.loaded(ctx, "initech", throttle.Policy{}, time.Now())
	testenv.Eventually(t, 5*time.Second, "initech's second pass", func() bool { return len(calls()) >= 2 })
	for _, c := range calls() {
		if c.tenant != "initech" {
			t.Fatalf("passes %+v: want initech's only", calls())
		}
	}
}

// TestMovedBringerPassesTheTenantsUnderAChangedDefault: a change of the
// default makes a pass, under the new default, for each tenant the worker
// moved jobs of whose policy is the default, and none for a tenant with
// limits of its own or one the worker moved nothing of.
func TestMovedBringerPassesTheTenantsUnderAChangedDefault(t *testing.T) {
	var log testenv.Buffer
	b, calls := recordedBringer(t, 0, nil, map[string]bool{"acme": true, "globex": true, "initech": true}, &log)
	to := throttle.Enforce(throttle.PerSecond(40, 40))
	underDefault := map[string]bool{"acme": true, "initech": true, "hooli": true}
	b.defaultChanged(context.Background(), func(tenant string) (throttle.Policy, bool) {
		return to, underDefault[tenant]
	})
	testenv.Eventually(t, 5*time.Second, "acme's and initech's passes", func() bool { return len(calls()) >= 2 })
	// globex's pass, due as soon, would have come before this one.
	b.changed(context.Background(), "initech", to)
	testenv.Eventually(t, 5*time.Second, "initech's second pass", func() bool { return len(calls()) >= 3 })
	got := calls()
	if got[0].tenant != "acme" || got[1].tenant != "initech" || got[2].tenant != "initech" {
		t.Fatalf("passes %+v: want acme's and initech's, then initech's", got)
	}
	for _, c := range got {
		if c.to.String() != to.String() {
			t.Fatalf("pass %+v: want it under the new default %s", c, to)
		}
	}
}

// TestMovedBringerPassesEveryChangeSoonAfterItStarted: within the horizon
// after the worker started, a change is passed whatever the worker moved:
// its predecessors, stopped by a deploy, moved jobs its rows do not count.
// The pass's log line names the key whose change it was.
func TestMovedBringerPassesEveryChangeSoonAfterItStarted(t *testing.T) {
	var log testenv.Buffer
	b, calls := recordedBringer(t, 3, nil, map[string]bool{}, &log)
	b.mu.Lock()
	b.started = time.Now()
	b.mu.Unlock()
	b.changed(context.Background(), "globex", throttle.Policy{})
	testenv.Eventually(t, 5*time.Second, "globex's pass", func() bool { return len(calls()) == 1 })
	testenv.Eventually(t, 5*time.Second, "the pass logged with its key", func() bool {
		return strings.Contains(log.String(), "key=globex") && strings.Contains(log.String(), "brought_back=3")
	})
}

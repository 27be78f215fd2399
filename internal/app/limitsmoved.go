package app

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/limits"
	"github.com/throttler/throttler/throttle"
)

// How the workers bring a tenant's moved jobs back after its limits
// change in the bucket (movedBringer).
const (
	// movedBringAfter is how long after a change a worker's pass runs, at
	// least: after the two passes of the command that made it (1 s and 2 s
	// after its write), so that a command brings back and counts what it
	// changed, and the workers find nothing left of it.
	movedBringAfter = 3 * time.Second
	// movedBringSpread is the most a worker adds to movedBringAfter, at
	// random, so that the fleet's workers seldom read the same copies at
	// once: the first brings them back, the others find none left.
	movedBringSpread = 2 * time.Second
)

// movedBringer brings a tenant's moved jobs back, from every worker that
// moved some, after its limits changed in the bucket, however the change
// was written: a `nats kv put` or an operator's program changes the
// backlog's pace as a `throttler limits set` does, rather than leaving its
// jobs to come back at slots reserved under the old limits. A command's
// own passes come first (movedBringAfter); changes of a tenant in quick
// succession make one pass, under the last. A worker passes over the
// tenants it moved no job of that still waits, so that a change of many
// tenants at once (a nightly sync of plans) costs nothing for those
// without a backlog, once its rows count every job moved that waits (the
// horizon after its start). Safe for concurrent use; run runs the passes.
type movedBringer struct {
	// bring brings back tenant's jobs moved to wait for limits that to
	// does not have (ops.BringBackStale), and returns how many.
	bring func(ctx context.Context, tenant string, to throttle.Policy, now time.Time) (int, error)
	// moved returns the tenants this worker moved jobs of that still wait
	// (consumer.Worker's rows), and whether that is all of them: when it
	// is not, every changed tenant is passed.
	moved  func() (map[string]bool, bool)
	after  time.Duration
	spread time.Duration
	// recent is how long before a worker starts a change may have left
	// jobs moved under the limits it replaced: the horizon
	// (THROTTLER_MAX_DEFER), the longest a job is moved for.
	recent time.Duration
	now    func() time.Time
	log    *slog.Logger
	// started is when the worker started: for the horizon after it, jobs
	// its predecessors moved may wait that its rows do not count. Read
	// under mu (tests set it).
	started time.Time

	mu      sync.Mutex
	changes map[string]change // tenant → its last change not yet passed
	wake    chan struct{}     // a change came: run looks at the times again
}

// change is a tenant's change of limits not yet passed: when its pass is
// due, the policy it changed to, the key whose change it is (the
// tenant's, or limits.DefaultKey), and whether it was made before the
// worker started (its pass is then made whatever the worker moved).
type change struct {
	due    time.Time
	to     throttle.Policy
	key    string
	before bool
}

// newMovedBringer returns a bringer with the package's timings.
func newMovedBringer(bring func(ctx context.Context, tenant string, to throttle.Policy, now time.Time) (int, error),
	moved func() (map[string]bool, bool), horizon time.Duration, log *slog.Logger) *movedBringer {
	return &movedBringer{bring: bring, moved: moved, after: movedBringAfter, spread: movedBringSpread, recent: horizon, now: time.Now, log: log,
		started: time.Now(), changes: map[string]change{}, wake: make(chan struct{}, 1)}
}

// changed tells the bringer that tenant's limits changed to to now.
func (b *movedBringer) changed(_ context.Context, tenant string, to throttle.Policy) {
	b.add(tenant, tenant, to, false)
}

// defaultChanged tells the bringer that the default's policy changed
// now: each tenant this worker moved jobs of whose policy is the default
// (policy reports it, and returns the tenant's policy) changed with it.
// Tenants past the worker's count of tenants (consumer.OtherTenants) are
// not named, and their jobs come back at their slots.
func (b *movedBringer) defaultChanged(_ context.Context, policy func(tenant string) (throttle.Policy, bool)) {
	if b.moved == nil {
		return
	}
	named, _ := b.moved()
	for tenant := range named {
		if to, ok := policy(tenant); ok {
			b.add(tenant, limits.DefaultKey, to, false)
		}
	}
}

// loaded tells the bringer that the worker, starting, found tenant's
// limits to written at written: when that is less than the horizon ago
// (recent), jobs moved under the limits it replaced may still wait,
// moved by workers since stopped, or by none if the change came while
// the fleet was down; the pass, made whatever this worker moved, brings
// them back. It costs a request per tenant changed within the horizon.
func (b *movedBringer) loaded(_ context.Context, tenant string, to throttle.Policy, written time.Time) {
	if b.now().Sub(written) < b.recent {
		b.add(tenant, tenant, to, true)
	}
}

// add records a change of tenant's limits to to, by a change of key, and
// wakes run.
func (b *movedBringer) add(tenant, key string, to throttle.Policy, before bool) {
	due := b.now().Add(b.after)
	if b.spread > 0 {
		due = due.Add(rand.N(b.spread))
	}
	b.mu.Lock()
	b.changes[tenant] = change{due: due, to: to, key: key, before: before || b.changes[tenant].before}
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// run makes the passes as they fall due, one at a time, until ctx ends.
func (b *movedBringer) run(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		due, next := b.due()
		for _, tc := range due {
			if ctx.Err() != nil {
				return
			}
			b.bringBack(ctx, tc)
		}
		if len(due) > 0 {
			continue // passes take time: more may have fallen due
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = next.Sub(b.now())
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
			t.Stop() // no stale tick after Stop (Go 1.23 timers)
		case <-t.C:
		}
	}
}

// tenantChange is a tenant's change whose pass is due.
type tenantChange struct {
	tenant string
	to     throttle.Policy
	key    string // the key whose change it is
	before bool   // made before the worker started
}

// due takes the changes whose pass is due, of the tenants this worker
// moved jobs of or that changed before it started, in the tenants'
// order, and returns them with when the next one falls due (zero: none
// waits). Within the horizon after the worker started, every change is
// passed: its predecessors, stopped, moved jobs its rows do not count.
func (b *movedBringer) due() ([]tenantChange, time.Time) {
	now := b.now()
	var due []tenantChange
	var next time.Time
	b.mu.Lock()
	for tenant, c := range b.changes {
		if c.due.After(now) {
			if next.IsZero() || c.due.Before(next) {
				next = c.due
			}
			continue
		}
		due = append(due, tenantChange{tenant, c.to, c.key, c.before})
		delete(b.changes, tenant)
	}
	// Past the horizon after the start, the rows count every job moved
	// that still waits.
	rowsCountAll := now.Sub(b.started) >= b.recent
	b.mu.Unlock()
	if len(due) == 0 {
		return nil, next
	}
	if b.moved != nil && rowsCountAll {
		moved, all := b.moved()
		if !all {
			return sortedChanges(due), next
		}
		due = slices.DeleteFunc(due, func(c tenantChange) bool { return !c.before && !moved[c.tenant] })
	}
	return sortedChanges(due), next
}

// sortedChanges returns due in the tenants' order.
func sortedChanges(due []tenantChange) []tenantChange {
	slices.SortFunc(due, func(x, y tenantChange) int { return strings.Compare(x.tenant, y.tenant) })
	return due
}

// bringBack makes the pass for a tenant's change, and logs what it did.
func (b *movedBringer) bringBack(ctx context.Context, c tenantChange) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	n, err := b.bring(ctx, c.tenant, c.to, b.now())
	switch {
	case err != nil && ctx.Err() == nil:
		b.log.Warn("bringing back a tenant's jobs moved under its old limits failed; they come back at their slots",
			"tenant", c.tenant, "key", c.key, "brought_back", n, "err", err)
	case n > 0:
		b.log.Info("a tenant's limits changed; its jobs moved under the old ones brought back",
			"tenant", c.tenant, "key", c.key, "spec", c.to.String(), "brought_back", n)
	}
}

// movedBy returns the tenants w moved jobs of that still wait, as its rows
// of `throttler top` count them, and whether that is all of them: not
// when there is no worker yet, nor when some are counted together past
// the worker's count of tenants (consumer.OtherTenants).
func movedBy(w *consumer.Worker) (map[string]bool, bool) {
	if w == nil {
		return nil, false
	}
	out, all := map[string]bool{}, true
	for _, r := range w.TopRows() {
		if r.Moved > 0 {
			if r.Tenant == consumer.OtherTenants {
				all = false
				continue
			}
			out[r.Tenant] = true
		}
	}
	return out, all
}

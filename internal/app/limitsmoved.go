package app

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

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

// movedBringer brings a tenant's moved jobs back, on every worker, after
// its limits changed in the bucket, however the change was written: a
// `nats kv put` or an operator's program changes the backlog's pace as a
// `throttler limits set` does, rather than leaving its jobs to come back
// at slots reserved under the old limits. A command's own passes come
// first (movedBringAfter); changes in quick succession make one pass,
// after the last. Safe for concurrent use.
type movedBringer struct {
	// bring brings back tenant's jobs moved to wait for limits that to
	// does not have (ops.BringBackStale), and returns how many.
	bring  func(ctx context.Context, tenant string, to throttle.Policy, now time.Time) (int, error)
	after  time.Duration
	spread time.Duration
	now    func() time.Time
	log    *slog.Logger

	mu      sync.Mutex
	changes map[string]change // tenant → its last change not yet passed
}

// change is a tenant's change of limits: when it was seen, and to what.
type change struct {
	at time.Time
	to throttle.Policy
}

// newMovedBringer returns a bringer of the fleet's moved jobs with the
// package's timings.
func newMovedBringer(bring func(ctx context.Context, tenant string, to throttle.Policy, now time.Time) (int, error), log *slog.Logger) *movedBringer {
	return &movedBringer{bring: bring, after: movedBringAfter, spread: movedBringSpread, now: time.Now, log: log}
}

// changed tells the bringer that tenant's limits changed to to now; its
// pass runs until ctx ends.
func (b *movedBringer) changed(ctx context.Context, tenant string, to throttle.Policy) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.changes == nil {
		b.changes = map[string]change{}
	}
	_, waiting := b.changes[tenant]
	b.changes[tenant] = change{at: b.now(), to: to}
	if !waiting {
		go b.pass(ctx, tenant)
	}
}

// pass waits until the pass for tenant's last change is due, then makes
// it.
func (b *movedBringer) pass(ctx context.Context, tenant string) {
	for {
		b.mu.Lock()
		c := b.changes[tenant]
		b.mu.Unlock()
		wait := c.at.Add(b.after).Sub(b.now())
		if b.spread > 0 {
			wait += rand.N(b.spread)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		b.mu.Lock()
		if !b.changes[tenant].at.Equal(c.at) {
			b.mu.Unlock()
			continue // changed again meanwhile: wait for the last change
		}
		delete(b.changes, tenant)
		b.mu.Unlock()
		b.bringBack(ctx, tenant, c)
		return
	}
}

// bringBack makes the pass for tenant's change c, and logs what it did.
func (b *movedBringer) bringBack(ctx context.Context, tenant string, c change) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	n, err := b.bring(ctx, tenant, c.to, b.now())
	switch {
	case err != nil && ctx.Err() == nil:
		b.log.Warn("bringing back a tenant's jobs moved under its old limits failed; they come back at their slots",
			"tenant", tenant, "brought_back", n, "err", err)
	case n > 0:
		b.log.Info("a tenant's limits changed; its jobs moved under the old ones brought back", "tenant", tenant, "brought_back", n)
	}
}

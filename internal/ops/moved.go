package ops

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/release"
	"github.com/throttler/throttler/tenant"
	"github.com/throttler/throttler/throttle"
)

// BringBackMovedOptions are what BringBackMoved waits for.
type BringBackMovedOptions struct {
	// Settle is how long after the change its first pass runs, and the
	// second after the first: the workers apply a change within a
	// second, and a job decided just before is moved under the old
	// limits, or is in a bundle being unpacked, during that time.
	// Defaults to 1s.
	Settle time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

// BringBackMoved brings the jobs of tenant t that wait off the consumer for
// a slot under its own limits back at once, in their order, after those
// limits changed (release.Moved), so that the new limits apply to its
// backlog now: a raised limit runs it faster at once, rather than at the
// old rate until every slot reserved under the old limits came. Each job
// comes back as a woken job, which the workers take before the jobs
// consumer's backlog, and is decided again (a slot reserved under other
// limits is given up); under lower limits it is moved again, one delivery
// more. It makes two passes, Settle apart (the second leaves the jobs the
// first brought back), and returns how many jobs they brought back; none,
// and at once, when the tenant had no job stored off the consumer.
func BringBackMoved(ctx context.Context, fl Fleet, t string, opts BringBackMovedOptions) (int, error) {
	if err := tenant.Validate(t); err != nil {
		return 0, fmt.Errorf("%w: tenant: %w", ErrBadInput, err)
	}
	settle, now := opts.Settle, opts.Now
	if settle <= 0 {
		settle = time.Second
	}
	if now == nil {
		now = time.Now
	}
	// A tenant with nothing moved at the change has nothing to bring back:
	// the command then returns at once.
	if moved, err := release.AnyMoved(ctx, fl.JetStream, fl.Stream, fl.Schedules, t); err != nil || !moved {
		return 0, err
	}
	total, seen := 0, map[string]bool{}
	for range 2 {
		select {
		case <-time.After(settle):
		case <-ctx.Done():
			return total, ctx.Err()
		}
		n, err := release.Moved(ctx, fl.JetStream, fl.Stream, fl.Schedules, t, now(), release.MovedOptions{Seen: seen})
		total += n
		if err != nil {
			return total, fmt.Errorf("bringing back %s's moved jobs: %w", t, err)
		}
	}
	return total, nil
}

// BringBackStale is the workers' own pass after tenant t's limits changed
// to policy to in the bucket, however the change was written (a command,
// the admin API, the nats CLI, a program of the operator's): it brings
// back at once, in their order, the jobs of t moved off the consumer to
// wait for a limit that to does not have (release.Moved), and returns how
// many. Those waiting for a limit of to (moved under it by a worker that
// had applied the change, or brought back by the command that made it and
// moved again) stay, as do those back early and moved again for the slot
// they hold (few: a copy that fires early is kept by the worker for its
// slot), so that every worker of the fleet can make the pass and only the
// first brings anything back. A tenant with nothing moved costs one
// request.
func BringBackStale(ctx context.Context, fl Fleet, t string, to throttle.Policy, now time.Time) (int, error) {
	if err := tenant.Validate(t); err != nil {
		return 0, fmt.Errorf("%w: tenant: %w", ErrBadInput, err)
	}
	if moved, err := release.AnyMoved(ctx, fl.JetStream, fl.Stream, fl.Schedules, t); err != nil || !moved {
		return 0, err
	}
	n, err := release.Moved(ctx, fl.JetStream, fl.Stream, fl.Schedules, t, now, release.MovedOptions{Stale: staleUnder(to)})
	if err != nil {
		return n, fmt.Errorf("bringing back %s's moved jobs: %w", t, err)
	}
	return n, nil
}

// staleUnder picks the wait reasons (header.WaitReason) of copies moved to
// wait for a limit that policy to does not have.
func staleUnder(to throttle.Policy) func(reason string) bool {
	kept := make(map[string]bool, len(to.Limits))
	for _, l := range to.Limits {
		kept[header.WaitLimit+l.String()] = true
	}
	return func(reason string) bool { return strings.HasPrefix(reason, header.WaitLimit) && !kept[reason] }
}

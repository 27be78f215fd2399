package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/throttler/throttler/release"
	"github.com/throttler/throttler/tenant"
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
		n, err := release.Moved(ctx, fl.JetStream, fl.Stream, fl.Schedules, t, now(), seen)
		total += n
		if err != nil {
			return total, fmt.Errorf("bringing back %s's moved jobs: %w", t, err)
		}
	}
	return total, nil
}

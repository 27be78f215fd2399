package throttle

import (
	"context"
	"errors"
	"slices"

	"github.com/redis/go-redis/v9"
)

// Unwait removes jobs of tenant from the waiting lists of the running caps
// (the tenant's, and the fleet's), for jobs that will never come back: an
// operator purged their parked messages. It returns how many places it
// removed; a job not waiting is no error. A job already called is not in
// a list but holds a placeholder lease: its waker, finding no parked
// message, hands the turn on (RunningCaps.Forfeit), as for any job gone.
//
// Without it a purged job's place would still be called in its turn, and
// its waker, finding no parked message, would hand the turn on: harmless,
// but each such place holds room under the cap for the waker's reads
// (about half a second), so a purged backlog of thousands would slow the
// tenant's new jobs for minutes.
func (l *Limiter) Unwait(ctx context.Context, tenant string, jobIDs []string) (int, error) {
	if len(jobIDs) == 0 {
		return 0, nil
	}
	_, queue, err := l.keys.capKeys(tenant)
	if err != nil {
		return 0, err
	}
	_, fleetQueue, err := l.keys.capKeys("")
	if err != nil {
		return 0, err
	}
	own := make([]any, len(jobIDs))
	fleet := make([]any, len(jobIDs))
	for i, id := range jobIDs {
		own[i] = id
		if fleet[i], err = l.keys.fleetMember(tenant, id); err != nil {
			return 0, err
		}
	}
	// Like every call of the engine, no command runs long: a purge of
	// thousands removes them unwaitChunk at a time, in one pipeline.
	p := l.lib.rdb.Pipeline()
	var cmds []*redis.IntCmd
	for part := range slices.Chunk(own, unwaitChunk) {
		cmds = append(cmds, p.ZRem(ctx, queue, part...))
	}
	for part := range slices.Chunk(fleet, unwaitChunk) {
		cmds = append(cmds, p.ZRem(ctx, fleetQueue, part...))
	}
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, &RedisError{Op: "ZREM " + queue, Err: err}
	}
	n := 0
	for _, c := range cmds {
		n += int(c.Val())
	}
	return n, nil
}

// unwaitChunk is the most members one ZREM of Unwait removes.
const unwaitChunk = 256

package throttle

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ParseLevel reads a level's name as Level.String writes it: "_global" or
// "group.NAME".
func ParseLevel(name string) (Level, bool) {
	if name == GlobalKey {
		return Global, true
	}
	g, ok := strings.CutPrefix(name, GroupKeyPrefix)
	return Level{Group: g}, ok && g != ""
}

// NoteQueued records that jobs were queued for a turn under the shared
// levels named (Level.String), so that the counter reads their waiting
// lists (<prefix>:{~}:census:queuers). A worker calls it once in a while
// per level, not per job.
func (c *Census) NoteQueued(ctx context.Context, levels []string) error {
	if len(levels) == 0 {
		return nil
	}
	members := make([]any, len(levels))
	for i, l := range levels {
		members[i] = l
	}
	pipe := c.rdb.Pipeline()
	pipe.SAdd(ctx, c.keys.censusKey("queuers"), members...)
	pipe.PExpire(ctx, c.keys.censusKey("queuers"), censusTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("throttle: noting levels with queued jobs: %w", err)
	}
	return nil
}

// Queued counts the jobs waiting for their turn in the lists of every
// level noted as queuing, and forgets the levels whose list is empty.
func (c *Census) Queued(ctx context.Context) (int64, error) {
	_, counts, err := queuing(ctx, c.rdb, c.keys)
	var n int64
	for _, x := range counts {
		n += x
	}
	return n, err
}

// queuing reads the levels noted as queuing and the jobs in each one's
// list, and forgets the levels whose list is empty (noted again when they
// queue again): it returns the others with their counts.
func queuing(ctx context.Context, rdb Client, keys keyspace) ([]Level, []int64, error) {
	key := keys.censusKey("queuers")
	pipe := rdb.Pipeline()
	members := pipe.SMembers(ctx, key)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, nil, fmt.Errorf("throttle: reading levels with queued jobs: %w", err)
	}
	pipe = rdb.Pipeline()
	var cards []*redis.IntCmd
	var read []Level
	var gone []any
	for _, name := range members.Val() {
		lv, ok := ParseLevel(name)
		if !ok {
			gone = append(gone, name)
			continue
		}
		cards = append(cards, pipe.ZCard(ctx, keys.levels().of(lv).list))
		read = append(read, lv)
	}
	if len(cards) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, nil, fmt.Errorf("throttle: counting queued jobs: %w", err)
		}
	}
	var out []Level
	var counts []int64
	for i, card := range cards {
		if card.Val() == 0 {
			gone = append(gone, read[i].String())
			continue
		}
		out, counts = append(out, read[i]), append(counts, card.Val())
	}
	// The levels still queuing keep their set alive while they do.
	pipe = rdb.Pipeline()
	if len(gone) > 0 {
		pipe.SRem(ctx, key, gone...)
	}
	if len(out) > 0 {
		pipe.PExpire(ctx, key, censusTTL)
	}
	if pipe.Len() > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, nil, fmt.Errorf("throttle: forgetting levels without queued jobs: %w", err)
		}
	}
	return out, counts, nil
}

// Queuing returns the levels with jobs queued, noted by any worker of the
// fleet (NoteQueuing): a worker that did not queue a job there itself (it
// restarted since) still pokes them, so that a level whose limit went
// away, or whose jobs' wakers died, hands its jobs on.
func (s *Shared) Queuing(ctx context.Context) ([]Level, error) {
	out, _, err := queuing(ctx, s.l.lib.rdb, s.l.keys)
	if err != nil {
		return nil, &RedisError{Op: "reading the levels with queued jobs", Err: err}
	}
	return out, nil
}

// NoteQueuing notes levels as queuing jobs, for Queuing and the census.
func (s *Shared) NoteQueuing(ctx context.Context, levels []Level) error {
	names := make([]string, len(levels))
	for i, lv := range levels {
		names[i] = lv.String()
	}
	return s.l.Census().NoteQueued(ctx, names)
}

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
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("throttle: noting levels with queued jobs: %w", err)
	}
	return nil
}

// Queued counts the jobs waiting for their turn in the lists of every
// level noted as queuing, and forgets the levels whose list is empty.
func (c *Census) Queued(ctx context.Context) (int64, error) {
	key := c.keys.censusKey("queuers")
	pipe := c.rdb.Pipeline()
	members := pipe.SMembers(ctx, key)
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("throttle: reading levels with queued jobs: %w", err)
	}
	names := members.Val()
	pipe = c.rdb.Pipeline()
	cards := make([]*redis.IntCmd, 0, len(names))
	var read []string
	var bad []any
	for _, name := range names {
		lv, ok := ParseLevel(name)
		if !ok {
			bad = append(bad, name)
			continue
		}
		list, _, _, _ := c.keys.levelKeys(lv)
		cards = append(cards, pipe.ZCard(ctx, list))
		read = append(read, name)
	}
	if len(cards) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return 0, fmt.Errorf("throttle: counting queued jobs: %w", err)
		}
	}
	var n int64
	for i, card := range cards {
		n += card.Val()
		if card.Val() == 0 {
			bad = append(bad, read[i])
		}
	}
	if len(bad) > 0 {
		pipe = c.rdb.Pipeline()
		pipe.SRem(ctx, key, bad...)
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, fmt.Errorf("throttle: forgetting levels without queued jobs: %w", err)
		}
	}
	return n, nil
}

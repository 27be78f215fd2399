package throttle

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// levelQueueScans bounds how many steps of ZSCAN (about 1000 jobs each)
// Queues reads of one level's list.
const levelQueueScans = 100

// LevelQueue is one tenant's place in a shared level's queue: its jobs waiting
// in its list for a turn (Shared.Queues).
type LevelQueue struct {
	Level Level
	// Jobs counts the tenant's jobs in the list. Exact is false when the
	// list was too long to read whole (about levelQueueScans thousand
	// jobs): Jobs then counts those read, and Ahead is as they say.
	Jobs  int
	Exact bool
	// Ahead counts the jobs of the list placed before the tenant's
	// first, to be called before it; Queued every job in the list.
	Ahead, Queued int64
}

// Queues finds the shared levels whose lists hold jobs of tenant waiting
// for a turn: the global level first, then the groups by name. It only
// reads. It scans the keyspace of every master for the levels' lists, and
// each list found for the tenant's jobs: an operator's tool, as Peek.
func (s *Shared) Queues(ctx context.Context, tenant string) ([]LevelQueue, error) {
	levels, err := s.Listed(ctx)
	if err != nil {
		return nil, err
	}
	var out []LevelQueue
	for _, lv := range levels {
		lk := s.l.keys.levels().of(lv)
		node, err := s.l.nodeFor(ctx, lk.tag)
		if err != nil {
			return nil, err
		}
		h, first, err := queueOf(ctx, node, lk.list, tenant)
		if err != nil {
			return nil, err
		}
		if lv == Global && h.Jobs > 0 {
			if err := groupTurn(ctx, node, lk, tenant, first, &h); err != nil {
				return nil, err
			}
		}
		if h.Jobs > 0 {
			h.Level = lv
			out = append(out, h)
		}
	}
	return out, nil
}

// Listed returns the shared levels with jobs waiting in their lists, the
// global level first, then the groups by name. It only reads, scanning
// the keyspace of every master: an operator's tool, as Peek.
func (s *Shared) Listed(ctx context.Context) ([]Level, error) {
	var mu sync.Mutex
	found := map[Level]bool{}
	err := s.l.eachMaster(ctx, func(ctx context.Context, node redis.Cmdable) error {
		lk := s.l.keys.levels()
		return scan(ctx, node, lk.listPattern(), func(key string) error {
			if lv, ok := lk.ofList(key); ok {
				mu.Lock()
				found[lv] = true
				mu.Unlock()
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	levels := make([]Level, 0, len(found))
	for lv := range found {
		levels = append(levels, lv)
	}
	slices.SortFunc(levels, func(a, b Level) int { return cmp.Compare(a.Group, b.Group) }) // "" (global) first
	return levels, nil
}

// queueOf reads tenant's jobs in a level's list (members cost/tenant/job
// id), in steps of ZSCAN, at most levelQueueScans, and returns the member
// of its first in the list.
func queueOf(ctx context.Context, node redis.Cmdable, list, tenant string) (LevelQueue, string, error) {
	h := LevelQueue{}
	pattern := "*/" + globEscape(tenant) + "/*"
	var first float64
	var firstMember string
	var cursor uint64
	for step := 0; ; step++ {
		kv, next, err := node.ZScan(ctx, list, cursor, pattern, 1000).Result()
		if err != nil {
			return h, "", &RedisError{Op: "ZSCAN " + list, Err: err}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			// The pattern also matches a job id holding "/tenant/".
			if w, ok := parseLevelMember(Global, kv[i]); !ok || w.Tenant != tenant {
				continue
			}
			place, err := strconv.ParseFloat(kv[i+1], 64)
			if err != nil {
				return h, "", &InvalidError{Code: CodeState, Detail: list + " holds the place " + strconv.Quote(kv[i+1])}
			}
			// The list is called in order of place, then of member.
			if h.Jobs == 0 || place < first || (place == first && kv[i] < firstMember) {
				first, firstMember = place, kv[i]
			}
			h.Jobs++
		}
		if cursor = next; cursor == 0 {
			h.Exact = true
			break
		}
		if step+1 >= levelQueueScans {
			break
		}
	}
	var err error
	if h.Queued, err = node.ZCard(ctx, list).Result(); err != nil {
		return h, "", &RedisError{Op: "ZCARD " + list, Err: err}
	}
	if h.Jobs > 0 {
		switch rank, err := node.ZRank(ctx, list, firstMember).Result(); {
		case errors.Is(err, redis.Nil): // called since the scan
		case err != nil:
			return h, "", &RedisError{Op: "ZRANK " + list, Err: err}
		default:
			h.Ahead = rank
		}
	}
	return h, firstMember, nil
}

// groupTurnRead bounds how many of a group's jobs groupTurn reads.
const groupTurnRead = 10000

// groupTurn sets h.Ahead for a tenant whose jobs at the global level have
// a group (first, its first job in the list, has an entry in the groups'
// order): the group's turns go to its jobs in the group's own order
// (lua/groups.lua), so the tenant's first job there takes the group's
// (k+1)-th place in the list, k the group's jobs before it in that order,
// and the jobs ahead are those placed before that turn. It reads at most
// groupTurnRead of the group's jobs; h.Exact is false when it had more.
func groupTurn(ctx context.Context, node redis.Cmdable, lk levelKeySet, tenant, first string, h *LevelQueue) error {
	lex := func(min, max string, n int64) ([]string, error) {
		v, err := node.ZRangeArgs(ctx, redis.ZRangeArgs{Key: lk.groups, Start: min, Stop: max, ByLex: true, Count: n}).Result()
		if err != nil {
			return nil, &RedisError{Op: "ZRANGE BYLEX " + lk.groups, Err: err}
		}
		return v, nil
	}
	own, err := lex("[>"+first+" ", "(>"+first+"!", 1)
	if err != nil {
		return err
	}
	if len(own) == 0 {
		// No group, and the list's own order holds; or the job was called
		// since the list was read (a group's jobs leave the list and its
		// order together): none ahead of it then.
		switch err := node.ZScore(ctx, lk.list, first).Err(); {
		case errors.Is(err, redis.Nil):
			h.Ahead = 0
		case err != nil:
			return &RedisError{Op: "ZSCORE " + lk.list, Err: err}
		}
		return nil
	}
	f := strings.Fields(own[0])
	if len(f) != 3 {
		return nil
	}
	group := f[1]
	entries, err := lex("["+group+" ", "("+group+"!", groupTurnRead+1)
	if err != nil {
		return err
	}
	if len(entries) > groupTurnRead {
		entries, h.Exact = entries[:groupTurnRead], false
	}
	pipe := node.Pipeline()
	var places []*redis.FloatCmd
	var mine []bool // whether the job of places[i] is the tenant's
	for _, e := range entries {
		if f := strings.Fields(e); len(f) == 3 {
			w, ok := parseLevelMember(Global, f[2])
			places, mine = append(places, pipe.ZScore(ctx, lk.list, f[2])), append(mine, ok && w.Tenant == tenant)
		}
	}
	if len(places) == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return &RedisError{Op: "ZSCORE " + lk.list, Err: err}
	}
	k := -1
	var listed []float64 // the group's places in the list
	for i, p := range places {
		v, err := p.Result()
		if err != nil {
			continue // called since the order was read
		}
		if mine[i] && k < 0 {
			k = len(listed)
		}
		listed = append(listed, v)
	}
	if k < 0 {
		return nil
	}
	slices.Sort(listed)
	ahead, err := node.ZCount(ctx, lk.list, "-inf", "("+strconv.FormatFloat(listed[k], 'g', -1, 64)).Result()
	if err != nil {
		return &RedisError{Op: "ZCOUNT " + lk.list, Err: err}
	}
	h.Ahead = ahead
	return nil
}

// globEscape escapes the characters SCAN's MATCH reads as a pattern.
func globEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

package throttle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// How much of a level Peek reads: its list and fair places may hold a
// flow or a job for every tenant of a busy fleet, and an operator's look
// must not stall Redis over them.
const (
	// levelHeadRead is how many jobs of the list's head Peek reads to count
	// them by tenant.
	levelHeadRead = 1000
	// levelHeadTenants is how many tenants of the head Peek names.
	levelHeadTenants = 5
	// levelFlowsRead is how many fair places Peek reads to count the flows
	// with jobs waiting.
	levelFlowsRead = 10000
)

// LevelSnapshot is what a shared level (Level) holds at one moment, read
// without changing anything (Shared.Peek).
type LevelSnapshot struct {
	// At is the moment: Redis TIME, unless Peek was given one.
	At time.Time `json:"at"`
	// Level is the level; Policy its policy now.
	Level  Level  `json:"-"`
	Policy Policy `json:"-"`
	// Buckets are its terms' states, in the order of Policy.Limits, as
	// Limiter.Peek shows a tenant's.
	Buckets []Bucket `json:"buckets"`
	// Wait is how long the terms alone would make a new job of cost 1
	// wait now; Binding is the term that sets it. A job also waits for
	// its turn behind the jobs of the list placed before it.
	Wait    time.Duration `json:"wait"`
	Binding Limit         `json:"held_by,omitzero"`
	// Queued counts the jobs waiting in the level's list for a turn
	// (exact).
	Queued int64 `json:"queued"`
	// Flows counts the flows (tenants; at the global level, groups for
	// the jobs that have one) with jobs in the list: those whose last
	// place lies past the place called last. FlowsExact is false when the
	// level held more than levelFlowsRead flows' places, and only those
	// read were counted.
	Flows      int  `json:"flows_waiting"`
	FlowsExact bool `json:"flows_exact"`
	// Head counts by tenant the jobs among the first HeadRead of the
	// list, the next to be called: at most levelHeadTenants, most first.
	Head     []TenantJobs `json:"head,omitempty"`
	HeadRead int          `json:"head_read"`
	// Passes counts the slots the level granted whose jobs have not
	// passed with them yet (granted a slot ahead, called and on their
	// way back, or kept for a later level); PassesAhead those whose slot
	// is still to come.
	Passes      int64 `json:"passes"`
	PassesAhead int64 `json:"passes_ahead"`
}

// TenantJobs is a count of one tenant's jobs.
type TenantJobs struct {
	Tenant string `json:"tenant"`
	Jobs   int    `json:"jobs"`
}

// Peek reads what level lv holds, as its next call would find it: its
// terms' states, the jobs waiting in its list and their flows, and the
// passes granted. It only reads: nothing is charged or written. at sets
// the moment; the zero time reads Redis TIME. The list and the flows are
// read in bounded parts (LevelSnapshot says which counts are exact).
func (s *Shared) Peek(ctx context.Context, lv Level, at time.Time) (LevelSnapshot, error) {
	lk := s.l.keys.levels().of(lv)
	node, err := s.l.nodeFor(ctx, lk.tag)
	if err != nil {
		return LevelSnapshot{}, err
	}
	snap := LevelSnapshot{At: at, Level: lv, Policy: s.Policy(lv)}
	if snap.At.IsZero() {
		if snap.At, err = node.Time(ctx).Result(); err != nil {
			return LevelSnapshot{}, &RedisError{Op: "TIME", Err: err}
		}
	}
	if snap.Buckets, snap.Wait, snap.Binding, err = s.l.peekTerms(ctx, node, lk.tag, snap.Policy, snap.At); err != nil {
		return LevelSnapshot{}, err
	}
	if snap.Queued, err = node.ZCard(ctx, lk.list).Result(); err != nil {
		return LevelSnapshot{}, &RedisError{Op: "ZCARD " + lk.list, Err: err}
	}
	if snap.Flows, snap.FlowsExact, err = flowsWaiting(ctx, node, lk.fair); err != nil {
		return LevelSnapshot{}, err
	}
	if snap.Head, snap.HeadRead, err = headByTenant(ctx, node, lk.list); err != nil {
		return LevelSnapshot{}, err
	}
	// The next call forgets the passes TTL past their slot.
	now := snap.At.UnixMicro()
	live := strconv.FormatInt(now-s.o.TTL.Microseconds(), 10)
	if snap.Passes, err = node.ZCount(ctx, lk.passes, live, "+inf").Result(); err != nil {
		return LevelSnapshot{}, &RedisError{Op: "ZCOUNT " + lk.passes, Err: err}
	}
	if snap.PassesAhead, err = node.ZCount(ctx, lk.passes, "("+strconv.FormatInt(now, 10), "+inf").Result(); err != nil {
		return LevelSnapshot{}, &RedisError{Op: "ZCOUNT " + lk.passes, Err: err}
	}
	return snap, nil
}

// flowsWaiting counts the flows of a level's fair places (fair) whose
// last place lies past V, the place called last (the field named by the
// empty string): a flow's
// places only grow, and the list is called in their order, so those are
// the flows with a job still in the list (a tie with V aside). It reads
// at most levelFlowsRead places; exact is false when there were more.
func flowsWaiting(ctx context.Context, node redis.Cmdable, fair string) (n int, exact bool, err error) {
	parse := func(v string) (float64, error) {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, &InvalidError{Code: CodeState, Detail: fmt.Sprintf("%s holds the place %q", fair, v)}
		}
		return f, nil
	}
	var v float64
	switch s, err := node.HGet(ctx, fair, "").Result(); {
	case errors.Is(err, redis.Nil):
	case err != nil:
		return 0, false, &RedisError{Op: "HGET " + fair, Err: err}
	default:
		if v, err = parse(s); err != nil {
			return 0, false, err
		}
	}
	read := 0
	var cursor uint64
	for {
		kv, next, err := node.HScan(ctx, fair, cursor, "*", 1000).Result()
		if err != nil {
			return 0, false, &RedisError{Op: "HSCAN " + fair, Err: err}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			// V; and at the global level a group's own order, its place
			// called last ("#<group>") and its tenants' ("<group>/<tenant>"):
			// the group itself is one flow (lua/groups.lua, GROUPS AT THE
			// GLOBAL LEVEL).
			if kv[i] == "" || strings.HasPrefix(kv[i], "#") || strings.Contains(kv[i], "/") {
				continue
			}
			f, err := parse(kv[i+1])
			if err != nil {
				return 0, false, err
			}
			read++
			if f > v {
				n++
			}
		}
		if cursor = next; cursor == 0 || read >= levelFlowsRead {
			return n, cursor == 0, nil
		}
	}
}

// headByTenant counts by tenant the jobs among the first levelHeadRead of
// a level's list: the levelHeadTenants with most, and how many were read.
func headByTenant(ctx context.Context, node redis.Cmdable, list string) ([]TenantJobs, int, error) {
	ms, err := node.ZRange(ctx, list, 0, levelHeadRead-1).Result()
	if err != nil {
		return nil, 0, &RedisError{Op: "ZRANGE " + list, Err: err}
	}
	counts := map[string]int{}
	var order []string // by first place in the list, to break ties
	for _, m := range ms {
		w, ok := parseLevelMember(Global, m)
		if !ok {
			continue
		}
		if counts[w.Tenant] == 0 {
			order = append(order, w.Tenant)
		}
		counts[w.Tenant]++
	}
	out := make([]TenantJobs, len(order))
	for i, t := range order {
		out[i] = TenantJobs{Tenant: t, Jobs: counts[t]}
	}
	slices.SortStableFunc(out, func(a, b TenantJobs) int { return cmp.Compare(b.Jobs, a.Jobs) })
	return out[:min(len(out), levelHeadTenants)], len(ms), nil
}

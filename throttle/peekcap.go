package throttle

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/lua"
)

// CapSnapshot is a running cap at one moment, as the next call of the cap
// would find it (lua/admit.lua: admit; lua/caps.lua: expire).
type CapSnapshot struct {
	// Running counts the leases of running jobs that count now.
	Running int `json:"running"`
	// Called counts the places held for waiting jobs whose turn came and
	// that are on their way back.
	Called int `json:"called"`
	// Waiting counts the jobs in line: those in the waiting list, and the
	// called jobs whose places expired, which the next call of the cap
	// puts back in the list (at most lua.MaxSweep expired entries a call).
	Waiting int `json:"waiting"`
	// Ahead counts the jobs in line that a new job would wait behind: all
	// of them in a tenant's cap; in the fleet's, whose places are fair,
	// those placed before the tenant's next job (PeekFleetFor), or all of
	// them when no tenant was named (PeekFleet).
	Ahead int `json:"ahead"`
}

// Full reports whether a new job would wait for a lease of c, a cap of n:
// the leases and places that count leave no room once the jobs ahead of
// it have theirs.
func (c *CapSnapshot) Full(n int64) bool {
	return int64(c.Running+c.Called+c.Ahead) >= n
}

// PeekFleet reads the fleet's running cap (CapOptions.MaxRunning) at at,
// the zero time reading Redis TIME: the leases and places that count, and
// the jobs waiting. It only reads.
func (l *Limiter) PeekFleet(ctx context.Context, at time.Time) (*CapSnapshot, error) {
	return l.PeekFleetFor(ctx, "", at)
}

// PeekFleetFor is PeekFleet as a new job of tenant finds the fleet's cap:
// its Ahead counts the jobs placed before the place the tenant's next job
// would take. tenant "" is PeekFleet.
func (l *Limiter) PeekFleetFor(ctx context.Context, tenant string, at time.Time) (*CapSnapshot, error) {
	var node redis.Cmdable
	switch c := l.lib.rdb.(type) {
	case *redis.Client:
		node = c
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, fleetTag)
		if err != nil {
			return nil, &RedisError{Op: "CLUSTER SLOTS", Err: err}
		}
		node = n
	default:
		return nil, fmt.Errorf("throttle: PeekFleet needs a *redis.Client or a *redis.ClusterClient, not %T", l.lib.rdb)
	}
	member := ""
	if tenant != "" {
		m, err := l.keys.fleetMember(tenant, "")
		if err != nil {
			return nil, err
		}
		member = strings.TrimSuffix(m, "/")
	}
	if at.IsZero() {
		var err error
		if at, err = node.Time(ctx).Result(); err != nil {
			return nil, &RedisError{Op: "TIME", Err: err}
		}
	}
	return peekCap(ctx, node, l.keys, "", member, at.UnixMicro())
}

// peekCap reads tenant's running cap ("" for the fleet's) at now (µs): the
// leases and places that count, and the jobs in line. In the fleet's, fair
// names the tenant (as its members do) whose new job's place sets Ahead;
// "" counts every job in line.
func peekCap(ctx context.Context, node redis.Cmdable, k keyspace, tenant, fair string, now int64) (*CapSnapshot, error) {
	leases, queue, err := k.capKeys(tenant)
	if err != nil {
		return nil, err
	}
	places, err := k.capPlaces(tenant)
	if err != nil {
		return nil, err
	}
	from := "(" + strconv.FormatInt(now, 10)
	all, err := node.ZCount(ctx, leases, from, "+inf").Result()
	if err != nil {
		return nil, &RedisError{Op: "ZCOUNT " + leases, Err: err}
	}
	called, err := node.ZRangeArgs(ctx, redis.ZRangeArgs{Key: leases, Start: from, Stop: "+inf", ByScore: true}).Result()
	if err != nil {
		return nil, &RedisError{Op: "ZRANGE " + leases, Err: err}
	}
	c := &CapSnapshot{}
	for _, m := range called {
		if strings.HasPrefix(m, "c:") {
			c.Called++
		}
	}
	c.Running = int(all) - c.Called
	n, err := node.ZCard(ctx, queue).Result()
	if err != nil {
		return nil, &RedisError{Op: "ZCARD " + queue, Err: err}
	}
	back, err := placesBack(ctx, node, leases, queue, places, now)
	if err != nil {
		return nil, err
	}
	c.Waiting = int(n) + len(back)
	c.Ahead = c.Waiting
	if tenant == "" && fair != "" {
		if c.Ahead, err = fairAhead(ctx, node, k.fairKey(), queue, fair, back); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// placesBack returns the places (in the list's scores) of the called jobs
// whose placeholders expired by now (µs) and that the next call of the cap
// puts back in its waiting list: as the function's expire does, among the
// first lua.MaxSweep expired entries, those not in the list already, each
// at the place kept for it, or (a placeholder of a version that kept
// none) before the head of the list.
func placesBack(ctx context.Context, node redis.Cmdable, leases, queue, places string, now int64) ([]float64, error) {
	gone, err := node.ZRangeArgs(ctx, redis.ZRangeArgs{Key: leases, Start: "-inf", Stop: strconv.FormatInt(now, 10),
		ByScore: true, Count: lua.MaxSweep}).Result()
	if err != nil {
		return nil, &RedisError{Op: "ZRANGE " + leases, Err: err}
	}
	var ids []string
	for _, m := range gone {
		if id, ok := strings.CutPrefix(m, "c:"); ok {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	kept, err := node.HMGet(ctx, places, ids...).Result()
	if err != nil {
		return nil, &RedisError{Op: "HMGET " + places, Err: err}
	}
	var head float64
	missing := 0
	for _, v := range kept {
		if v == nil {
			missing++
		}
	}
	if missing > 0 {
		h, err := node.ZRangeWithScores(ctx, queue, 0, 0).Result()
		if err != nil {
			return nil, &RedisError{Op: "ZRANGE " + queue, Err: err}
		}
		if len(h) > 0 {
			head = h[0].Score
		}
		head -= float64(missing) + 1
	}
	var out []float64
	for i, id := range ids {
		var place float64
		if s, ok := kept[i].(string); ok {
			if place, err = strconv.ParseFloat(s, 64); err != nil {
				return nil, &InvalidError{Code: CodeState, Detail: fmt.Sprintf("%s holds the place %q", places, s)}
			}
		} else {
			head++
			place = head
		}
		// ZMSCORE would read them at once, but go-redis reads its missing
		// scores as 0, a place the list may hold.
		switch err := node.ZScore(ctx, queue, id).Err(); {
		case errors.Is(err, redis.Nil):
			out = append(out, place)
		case err != nil:
			return nil, &RedisError{Op: "ZSCORE " + queue, Err: err}
		}
	}
	return out, nil
}

// fairAhead counts the jobs in the fleet's line placed at or before the
// place the next job of tenant (fair, as its members name it) would take:
// one after the later of the list's virtual time and the tenant's last
// place (lua/caps.lua, FAIR: fairPlace). back are the places of the
// jobs the next call puts back in the list.
func fairAhead(ctx context.Context, node redis.Cmdable, fairKey, queue, fair string, back []float64) (int, error) {
	v, err := node.HMGet(ctx, fairKey, "", fair).Result()
	if err != nil {
		return 0, &RedisError{Op: "HMGET " + fairKey, Err: err}
	}
	var place float64
	for _, x := range v {
		if s, ok := x.(string); ok {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return 0, &InvalidError{Code: CodeState, Detail: fmt.Sprintf("%s holds the place %q", fairKey, s)}
			}
			place = max(place, f)
		}
	}
	place++
	n, err := node.ZCount(ctx, queue, "-inf", strconv.FormatFloat(place, 'f', -1, 64)).Result()
	if err != nil {
		return 0, &RedisError{Op: "ZCOUNT " + queue, Err: err}
	}
	ahead := int(n)
	for _, p := range back {
		if p <= place {
			ahead++
		}
	}
	return ahead, nil
}

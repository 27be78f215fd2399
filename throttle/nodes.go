package throttle

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// nodeOf returns the Redis node that holds tenant's keys.
func (l *Limiter) nodeOf(ctx context.Context, tenant string) (redis.Cmdable, error) {
	tag, err := l.keys.tag(tenant)
	if err != nil {
		return nil, err
	}
	return l.nodeFor(ctx, tag)
}

// nodeFor returns the Redis node that holds the keys of hash tag tag. A
// client of a master behind Sentinel (redis.NewFailoverClient) is a
// *redis.Client.
func (l *Limiter) nodeFor(ctx context.Context, tag string) (redis.Cmdable, error) {
	switch c := l.lib.rdb.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, tag)
		if err != nil {
			return nil, &RedisError{Op: "CLUSTER SLOTS", Err: err}
		}
		return n, nil
	}
	return nil, fmt.Errorf("throttle: Peek needs a *redis.Client or a *redis.ClusterClient, not %T", l.lib.rdb)
}

// eachMaster calls fn with every master of the Redis the limiter uses:
// the one of a single node or Sentinel, each of a Cluster (at once, so fn
// must be safe for concurrent use).
func (l *Limiter) eachMaster(ctx context.Context, fn func(ctx context.Context, node redis.Cmdable) error) error {
	switch c := l.lib.rdb.(type) {
	case *redis.Client:
		return fn(ctx, c)
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return fn(ctx, n) })
	}
	return fmt.Errorf("throttle: reading every master needs a *redis.Client or a *redis.ClusterClient, not %T", l.lib.rdb)
}

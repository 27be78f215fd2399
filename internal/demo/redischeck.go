package demo

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// ownKey matches the keys a demo run writes: every key starts with the
// run's prefix, "demo" and a base-36 time (demoVars).
var ownKey = regexp.MustCompile(`^demo[0-9a-z]+:`)

// maxScans bounds the SCAN calls spent looking for a key the demo did not
// write, per node; past it, the Redis counts as in use.
const maxScans = 100

// foreignKey returns a key of rdb that no demo wrote (or a function
// library that is not the worker's), or "" when every key it holds is a
// demo's (or it holds none). A Redis with such keys serves
// something else: the demo writes keys and loads its function library
// there. It reads every master of a cluster.
func foreignKey(ctx context.Context, rdb redis.UniversalClient) (string, error) {
	if c, ok := rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		found := ""
		err := c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			k, err := foreignKeyOn(ctx, node)
			mu.Lock()
			defer mu.Unlock()
			if found == "" {
				found = k
			}
			return err
		})
		return found, err
	}
	return foreignKeyOn(ctx, rdb)
}

// foreignKeyOn is foreignKey for one server; a function library other than
// the worker's counts too, named "library NAME".
func foreignKeyOn(ctx context.Context, rdb redis.Cmdable) (string, error) {
	libs, err := rdb.FunctionList(ctx, redis.FunctionListQuery{}).Result()
	if err != nil {
		return "", fmt.Errorf("reading REDIS_URL's function libraries: %w", err)
	}
	for _, l := range libs {
		if !strings.HasPrefix(l.Name, "throttle_") {
			return "library " + l.Name, nil
		}
	}
	var cursor uint64
	for range maxScans {
		keys, next, err := rdb.Scan(ctx, cursor, "*", 1000).Result()
		if err != nil {
			return "", fmt.Errorf("reading REDIS_URL's keys: %w", err)
		}
		for _, k := range keys {
			if !ownKey.MatchString(k) {
				return k, nil
			}
		}
		if next == 0 {
			return "", nil
		}
		cursor = next
	}
	return "(more keys than the demo checks)", nil
}

package app

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/config"
)

// NewRedis returns the client for REDIS_URL in THROTTLER_REDIS_MODE: a
// *redis.Client for a single server, a *redis.ClusterClient for a Redis
// Cluster, or a *redis.Client from redis.NewFailoverClient that finds the
// master through the sentinels. Every part of the binary that talks to
// Redis gets its client here, so that all honour the mode.
//
// In every mode THROTTLER_REDIS_TIMEOUT bounds every dial, read and write,
// and the pool is sized for workers workers sharing the client
// (max(10, THROTTLER_CONCURRENCY/4) connections each, per node of a
// cluster). go-redis's own retries are cut to one dial per attempt and one
// retry of a failed command: the worker has its own backoff and its
// THROTTLER_ON_REDIS_ERROR policy, and with go-redis's defaults (three
// retries, each dialling five times 100 ms apart) a batch decided while
// Redis refused connections waited out the whole timeout before the policy
// applied. The client connects lazily: NewRedis makes no connection.
func NewRedis(cfg *config.Config, workers int) (redis.UniversalClient, error) {
	t := redisTuning{timeout: cfg.RedisTimeout, pool: max(1, workers) * max(10, cfg.Concurrency/4)}
	switch cfg.RedisMode {
	case config.RedisSingle:
		o, err := redis.ParseURL(cfg.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		t.apply(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.DialerRetries, &o.MaxRetries, &o.PoolSize)
		return redis.NewClient(o), nil
	case config.RedisCluster:
		o, err := redis.ParseClusterURL(cfg.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("REDIS_URL in cluster mode: %w", err)
		}
		t.apply(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.DialerRetries, &o.MaxRetries, &o.PoolSize)
		o.ClusterStateReloadInterval = clusterReloadInterval
		return redis.NewClusterClient(o), nil
	case config.RedisSentinel:
		o, err := redis.ParseFailoverURL(cfg.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("REDIS_URL in sentinel mode: %w", err)
		}
		// The same options serve the sentinels and the master.
		t.apply(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.DialerRetries, &o.MaxRetries, &o.PoolSize)
		return redis.NewFailoverClient(o), nil
	}
	return nil, fmt.Errorf("THROTTLER_REDIS_MODE: unknown mode %q", cfg.RedisMode)
}

// clusterReloadInterval is how old the cluster client's slot map may grow
// before a call reads it again (CLUSTER SLOTS, in the background). go-redis
// reads it again on a MOVED reply, but a dead master answers nothing: with
// go-redis's default of a minute, the tenants of a master that died kept
// calling it, and waiting, for up to a minute after its replica had taken
// over (measured by BenchmarkFleet: 38 s). A read a second per worker costs
// the cluster next to nothing.
const clusterReloadInterval = time.Second

// redisTuning is what the worker sets on go-redis's options, whatever the
// mode; see NewRedis.
type redisTuning struct {
	timeout time.Duration
	pool    int
}

// apply sets the fields of one mode's options struct, each given by its
// address since go-redis has no type common to them.
func (t redisTuning) apply(dial, read, write *time.Duration, dialerRetries, maxRetries, pool *int) {
	*dial, *read, *write = t.timeout, t.timeout, t.timeout
	*dialerRetries = 1
	*maxRetries = 1
	*pool = t.pool
}

package app

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/config"
)

// RedisOptions returns the go-redis options for REDIS_URL with
// THROTTLER_REDIS_TIMEOUT on every dial, read and write, and a pool sized
// for workers workers sharing the client (max(10, THROTTLER_CONCURRENCY/4)
// connections each). go-redis's own retries are cut to one dial per
// attempt and one retry of a failed command: the worker has its own backoff
// and its THROTTLER_ON_REDIS_ERROR policy, and with go-redis's defaults
// (three retries, each dialling five times 100 ms apart) a batch decided
// while Redis refused connections waited out the whole timeout before the
// policy applied.
func RedisOptions(cfg *config.Config, workers int) (*redis.Options, error) {
	opts, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	opts.ReadTimeout = cfg.RedisTimeout
	opts.WriteTimeout = cfg.RedisTimeout
	opts.DialTimeout = cfg.RedisTimeout
	opts.DialerRetries = 1
	opts.MaxRetries = 1
	opts.PoolSize = max(1, workers) * max(10, cfg.Concurrency/4)
	return opts, nil
}

package app

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisTuned is what NewRedis must set in every mode.
type redisTuned struct {
	user, password            string
	dial, read, write         time.Duration
	dialerRetries, maxRetries int
	pool                      int
	tls                       bool
}

func TestNewRedisEveryMode(t *testing.T) {
	tests := []struct {
		mode, url string
		want      func(t *testing.T, c redis.UniversalClient) redisTuned
	}{
		{"single", "rediss://app:s3cret@redis.example:6380/2", func(t *testing.T, c redis.UniversalClient) redisTuned {
			o := as[*redis.Client](t, c).Options()
			if o.Addr != "redis.example:6380" || o.DB != 2 {
				t.Errorf("address %q db %d: not those of REDIS_URL", o.Addr, o.DB)
			}
			return redisTuned{o.Username, o.Password, o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.DialerRetries, o.MaxRetries, o.PoolSize, o.TLSConfig != nil}
		}},
		{"cluster", "rediss://app:s3cret@h1:6379?addr=h2:6379&addr=h3:6379", func(t *testing.T, c redis.UniversalClient) redisTuned {
			o := as[*redis.ClusterClient](t, c).Options()
			if len(o.Addrs) != 3 || o.Addrs[2] != "h3:6379" {
				t.Errorf("addresses %q: not those of REDIS_URL", o.Addrs)
			}
			if o.ClusterStateReloadInterval != clusterReloadInterval {
				t.Errorf("slot map read again every %s, want %s: a failed-over master's tenants would wait that long", o.ClusterStateReloadInterval, clusterReloadInterval)
			}
			return redisTuned{o.Username, o.Password, o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.DialerRetries, o.MaxRetries, o.PoolSize, o.TLSConfig != nil}
		}},
		{"sentinel", "rediss://s1:26379/2?master_name=jobs&addr=s2:26379&username=app&password=s3cret", func(t *testing.T, c redis.UniversalClient) redisTuned {
			// A failover client is a *redis.Client whose options are the
			// master's.
			o := as[*redis.Client](t, c).Options()
			if o.DB != 2 {
				t.Errorf("db %d, want 2", o.DB)
			}
			return redisTuned{o.Username, o.Password, o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.DialerRetries, o.MaxRetries, o.PoolSize, o.TLSConfig != nil}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			c := mustSettle(t, map[string]string{
				"THROTTLER_REDIS_MODE":    tt.mode,
				"REDIS_URL":               tt.url,
				"THROTTLER_REDIS_TIMEOUT": "750ms",
				"THROTTLER_CONCURRENCY":   "64",
			})
			rdb, err := NewRedis(c.Config, 3)
			if err != nil {
				t.Fatalf("NewRedis: %v", err)
			}
			defer rdb.Close()
			got := tt.want(t, rdb)
			// The worker retries with its own backoff and policy: go-redis
			// dials once per attempt and retries a command once. Three
			// workers of 64 handlers: 16 connections each.
			want := redisTuned{"app", "s3cret", 750 * time.Millisecond, 750 * time.Millisecond, 750 * time.Millisecond, 1, 1, 48, true}
			if got != want {
				t.Errorf("options %+v, want %+v", got, want)
			}
		})
	}
}

// as returns c as a T, failing the test if it is not one.
func as[T redis.UniversalClient](t *testing.T, c redis.UniversalClient) T {
	t.Helper()
	v, ok := c.(T)
	if !ok {
		t.Fatalf("client is a %T, want a %T", c, v)
	}
	return v
}

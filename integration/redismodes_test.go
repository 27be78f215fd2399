package integration

import (
	"context"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

// TestRedisModesDecideJobs: a worker configured with THROTTLER_REDIS_MODE
// cluster or sentinel, and REDIS_URL in that mode's form, decides jobs
// through that Redis: a tenant within its burst runs, one over it is
// deferred, and the buckets read back through the same client (as
// `throttler inspect` reads them) hold the reservations.
func TestRedisModesDecideJobs(t *testing.T) {
	tests := []struct {
		mode string
		url  func(t *testing.T) string
	}{
		{"cluster", func(t *testing.T) string {
			c := testenv.StartRedisCluster(t, 3)
			return "redis://" + c.Addrs[0] + "?addr=" + c.Addrs[1] + "&addr=" + c.Addrs[2]
		}},
		{"sentinel", func(t *testing.T) string {
			s := testenv.StartRedisSentinel(t, 2)
			return "redis://" + s.Addrs[0] + "?master_name=" + s.MasterName + "&addr=" + s.Addrs[1]
		}},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			e := setup(t)
			cfg := e.config(map[string]string{
				"THROTTLER_REDIS_MODE":    tt.mode,
				"REDIS_URL":               tt.url(t),
				"THROTTLER_DEFAULT_LIMIT": "1000/s",
				// acme's third job waits a minute, its fifth three: all
				// within THROTTLER_MAX_DEFER, so each reserves its slot.
				"THROTTLER_TENANT_LIMITS": "acme=1/m:2",
			})
			if cfg.RedisAddrs[0] == e.redis.Addr {
				t.Fatalf("the worker would use the test's single Redis")
			}
			e.ensureStream(cfg)
			w := e.startWorker(cfg, nil)
			out := e.collect("done.*")
			for range 5 {
				e.publish("jobs.acme", nil, []byte("x"))
			}
			e.publish("jobs.globex", nil, []byte("x"))
			out.waitCount(t, 3, 20*time.Second) // acme's burst and globex's job
			testenv.Eventually(t, 20*time.Second, "acme's jobs over its burst deferred", func() bool {
				return w.stats()["acme"].Deferred >= 3
			})
			if s := w.stats()["acme"]; s.Completed != 2 {
				t.Errorf("acme: %d jobs completed, want its burst of 2", s.Completed)
			}
			w.waitCompleted(t, "globex", 1)

			lim, err := throttle.New(e.redisClient(cfg), throttle.Options{Policies: cfg.Rules, Prefix: cfg.KeyPrefix})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			snap, err := lim.Peek(ctx, "acme", time.Time{})
			if err != nil {
				t.Fatalf("Peek through the %s client: %v", tt.mode, err)
			}
			if snap.Reserved != 3 || snap.Wait < 2*time.Minute {
				t.Errorf("acme holds %d reserved slots and a new job waits %s, want 3 and over 2m", snap.Reserved, snap.Wait)
			}
		})
	}
}

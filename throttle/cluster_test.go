package throttle_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

// TestCluster decides jobs of 50 tenants with two limits each on a real
// three-master Redis Cluster, one by one and in batches, and again after
// every master lost its script cache.
func TestCluster(t *testing.T) {
	cluster := testenv.StartRedisCluster(t, 3)
	rdb := cluster.Client(t)
	prefix := testPrefix(t)
	ctx := context.Background()
	// 6/min with a burst of 5, and 50/h with a burst of 20: five jobs at
	// once are admitted, the sixth waits 10s for the first limit. The
	// requests all carry the time t0 but Redis expires a bucket by its own
	// clock once it would be full again, so the rates are slow enough that
	// no bucket expires while a slow machine runs the test.
	limits := throttle.Limits{throttle.PerMinute(6, 5), throttle.PerHour(50, 20)}
	l := newLimiter(t, rdb, prefix, time.Minute, limits)
	if err := l.Load(ctx); err != nil {
		t.Fatalf("Load: %v", err)
	}
	// The functions are on every master.
	loaded := func(node *redis.Client) bool {
		libs, err := node.FunctionList(ctx, redis.FunctionListQuery{}).Result()
		if err != nil {
			t.Fatalf("FUNCTION LIST on %s: %v", node.Options().Addr, err)
		}
		for _, lib := range libs {
			for _, fn := range lib.Functions {
				if fn.Name == decideFn() {
					return true
				}
			}
		}
		return false
	}
	var masters []*redis.Client
	var mu sync.Mutex
	if err := rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		masters = append(masters, node)
		return nil
	}); err != nil {
		t.Fatalf("ForEachMaster: %v", err)
	}
	for _, node := range masters {
		if !loaded(node) {
			t.Fatalf("master %s has no %s after Load", node.Options().Addr, decideFn())
		}
	}
	const tenants = 50
	tenant := func(i int) string { return fmt.Sprintf("tenant-%03d", i) }
	want := func(k int) throttle.Decision {
		if k < 5 {
			return admitted(int64(4 - k))
		}
		return reserved(time.Duration(k-4) * 10 * time.Second)
	}

	// One by one: three jobs per tenant.
	for i := range tenants {
		for k := range 3 {
			d := decide(t, l, throttle.Request{Tenant: tenant(i), JobID: fmt.Sprintf("j%d", k), At: t0})
			sameDecision(t, fmt.Sprintf("%s job %d", tenant(i), k), d, want(k))
		}
	}
	// In one batch: three more jobs per tenant, interleaved across tenants.
	batch := func(from int) {
		t.Helper()
		var reqs []throttle.Request
		for k := from; k < from+3; k++ {
			for i := range tenants {
				reqs = append(reqs, throttle.Request{Tenant: tenant(i), JobID: fmt.Sprintf("j%d", k), At: t0})
			}
		}
		for n, r := range l.DecideBatch(ctx, reqs) {
			if r.Err != nil {
				t.Fatalf("DecideBatch request %d (%s %s): %v", n, reqs[n].Tenant, reqs[n].JobID, r.Err)
			}
			sameDecision(t, fmt.Sprintf("DecideBatch %s %s", reqs[n].Tenant, reqs[n].JobID), r.Decision, want(from+n/tenants))
		}
	}
	batch(3)

	// The keys are spread over the masters, and each names one hash tag.
	perNode := map[string]int{}
	var all []string
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		ks, err := node.Keys(ctx, prefix+"*").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		perNode[node.Options().Addr] = len(ks)
		all = append(all, ks...)
		return nil
	})
	if err != nil {
		t.Fatalf("KEYS on every master: %v", err)
	}
	for _, k := range all {
		checkHashTag(t, k)
	}
	total, used := len(all), 0
	for _, n := range perNode {
		if n > 0 {
			used++
		}
	}
	t.Logf("keys per master: %v", perNode)
	// Two state keys per tenant and a reservation for each job that waits.
	if wantKeys := tenants * (2 + 1); total != wantKeys || used < 2 {
		t.Fatalf("keys per master %v: want %d keys on more than one master", perNode, wantKeys)
	}

	// Every master forgets the functions; batches and single calls still
	// work, and load them again on every master.
	for _, node := range masters {
		if err := node.FunctionFlush(ctx).Err(); err != nil {
			t.Fatalf("FUNCTION FLUSH on %s: %v", node.Options().Addr, err)
		}
	}
	batch(6)
	for _, node := range masters {
		if !loaded(node) {
			t.Fatalf("master %s has no %s after a batch met FUNCTION FLUSH", node.Options().Addr, decideFn())
		}
	}
	// One master alone forgets them (a new master, say): a call of a
	// tenant on it recovers.
	if err := masters[0].FunctionFlush(ctx).Err(); err != nil {
		t.Fatalf("FUNCTION FLUSH: %v", err)
	}
	for i := range tenants {
		d := decide(t, l, throttle.Request{Tenant: tenant(i), JobID: "j9", At: t0})
		sameDecision(t, "single call after FUNCTION FLUSH", d, want(9))
	}
	if !loaded(masters[0]) {
		t.Fatalf("the master that lost its functions has none after the calls")
	}
}

package testenv

import (
	"context"
	"testing"
	"time"
)

// TestRedisClusterFailover: a cluster of 3 masters with a replica each
// forms with every replica in sync; killing the master of a key promotes
// its replica, which still holds the key.
func TestRedisClusterFailover(t *testing.T) {
	cl := StartRedisClusterWith(t, ClusterOptions{Masters: 3, Replicas: 1, NodeTimeout: time.Second})
	if len(cl.Addrs) != 6 {
		t.Fatalf("Addrs = %v, want 6 addresses", cl.Addrs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc := cl.Client(t)
	if err := cc.Set(ctx, "{acme}:k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	// WAIT: the write reached the replica before the master dies.
	if n, err := cc.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT = %d, %v; want 1 replica", n, err)
	}
	old, err := cl.MasterOf("{acme}")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cl.KillNode(t, old)
	now := cl.WaitFailover(t, "{acme}", old, 20*time.Second)
	t.Logf("master of {acme}: %s, then %s after %s", old, now, time.Since(start).Round(time.Millisecond))
	if now == old {
		t.Fatalf("still served by %s", old)
	}
	// go-redis reloads its slot map only every minute, or on MOVED: a dead
	// master's connection errors alone do not make it look again. The
	// reload it is asked for runs in the background, so the read is
	// retried until it reaches the new master.
	cc.ReloadState(ctx)
	var got string
	Eventually(t, 10*time.Second, "GET {acme}:k from the promoted replica", func() bool {
		got, err = cc.Get(ctx, "{acme}:k").Result()
		return err == nil
	})
	if got != "v" {
		t.Fatalf("GET after failover = %q; want v", got)
	}
}

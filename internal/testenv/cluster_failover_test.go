package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
	old, err := cl.MasterOf("{acme}")
	if err != nil {
		t.Fatal(err)
	}
	// WAIT counts the replicas that have the writes made on its own
	// connection: write and wait on one connection to the key's master,
	// so that the write reached the replica before the master dies.
	master := redis.NewClient(&redis.Options{Addr: old})
	defer master.Close()
	conn := master.Conn()
	defer conn.Close()
	if err := conn.Set(ctx, "{acme}:k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if n, err := conn.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT = %d, %v; want 1 replica", n, err)
	}
	start := time.Now()
	cl.KillNode(t, old)
	now := cl.WaitFailover(t, "{acme}", old, 20*time.Second)
	t.Logf("master of {acme}: %s, then %s after %s", old, now, time.Since(start).Round(time.Millisecond))
	if now == old {
		t.Fatalf("still served by %s", old)
	}
	// The promoted replica holds the key: read it there directly (a
	// cluster client's view of the slots is not what this tests).
	node := redis.NewClient(&redis.Options{Addr: now})
	defer node.Close()
	got, err := node.Do(ctx, "GET", "{acme}:k").Text()
	if err != nil || got != "v" {
		t.Fatalf("GET {acme}:k on the new master %s = %q, %v; want v", now, got, err)
	}
}

package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
)

func TestFreePort(t *testing.T) {
	port := FreePort(t)
	if port <= 0 || port > 65535 {
		t.Fatalf("FreePort() = %d, want a valid port", port)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(loopback, strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("listen on free port %d: %v", port, err)
	}
	l.Close()
}

func TestRedisStopRestart(t *testing.T) {
	ctx := t.Context()
	r := StartRedis(t)
	if got, want := r.URL(), "redis://"+r.Addr; got != want {
		t.Errorf("URL() = %q, want %q", got, want)
	}
	pid := r.Pid()
	if pid <= 0 {
		t.Fatalf("Pid() = %d, want > 0", pid)
	}
	c := r.Client(t)
	if err := c.Set(ctx, "greeting", "hello", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := c.Get(ctx, "greeting").Result(); err != nil || got != "hello" {
		t.Fatalf("GET = %q, %v; want %q", got, err, "hello")
	}
	sha, err := c.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		t.Fatalf("SCRIPT LOAD: %v", err)
	}

	addr := r.Addr
	r.Stop(t)
	if got := r.Pid(); got != 0 {
		t.Errorf("Pid() after Stop = %d, want 0", got)
	}
	r.Stop(t) // idempotent
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(stopCtx).Err(); err == nil {
		t.Fatal("PING after Stop succeeded, want an error")
	}

	r.Restart(t)
	if r.Addr != addr {
		t.Fatalf("Addr changed across Restart: %s -> %s", addr, r.Addr)
	}
	if got := r.Pid(); got <= 0 || got == pid {
		t.Errorf("Pid() after Restart = %d, want a new pid (old %d)", got, pid)
	}
	if err := c.Get(ctx, "greeting").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after Restart: err = %v, want redis.Nil (data must be gone)", err)
	}
	exists, err := c.ScriptExists(ctx, sha).Result()
	if err != nil || len(exists) != 1 || exists[0] {
		t.Fatalf("SCRIPT EXISTS after Restart = %v, %v; want [false]", exists, err)
	}
	if err := c.Set(ctx, "greeting", "again", 0).Err(); err != nil {
		t.Fatalf("SET after Restart: %v", err)
	}
	if got, err := c.Get(ctx, "greeting").Result(); err != nil || got != "again" {
		t.Fatalf("GET after Restart = %q, %v; want %q", got, err, "again")
	}

	// Restart of a running server, then Stop/Start.
	r.Restart(t)
	r.Stop(t)
	r.Start(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Stop/Start: %v", err)
	}
}

// A port picked is claimed: no later pick, of this process or another
// test process, gets it while this process lives, so a server stopped
// and started again finds its port free.
func TestPickedPortIsClaimed(t *testing.T) {
	port := FreePort(t)
	if claimPort(port) {
		t.Fatalf("port %d, picked, could be claimed again", port)
	}
	if other := FreePort(t); other == port {
		t.Fatalf("port %d picked twice", port)
	}
}

// A redis-server started on a port another server holds exits, and the
// other's answers must not pass for its own: two tests would share one
// server, and one's FLUSHALL or kill would reach the other.
func TestRedisOnATakenPortIsNotTheOther(t *testing.T) {
	other := StartRedis(t)
	proc, err := launchRedis(lookBinary(t, "redis-server"), t.TempDir(), other.port, nil)
	if err == nil {
		_ = proc.kill()
		t.Fatalf("a redis-server on the taken port %d passed as started: the other server answered for it", other.port)
	}
	if !errors.Is(err, errExited) {
		t.Fatalf("start on a taken port: %v, want the process's exit (so another port is tried)", err)
	}
}

func TestRedisCluster(t *testing.T) {
	ctx := t.Context()
	cl := StartRedisCluster(t, 3)
	if len(cl.Addrs) != 3 {
		t.Fatalf("Addrs = %v, want 3 addresses", cl.Addrs)
	}
	cc := cl.Client(t)
	const n = 100
	for i := range n {
		key := fmt.Sprintf("{tag%d}:key", i)
		if err := cc.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
	}
	for i := range n {
		key := fmt.Sprintf("{tag%d}:key", i)
		got, err := cc.Get(ctx, key).Int()
		if err != nil || got != i {
			t.Fatalf("GET %s = %d, %v; want %d", key, got, err, i)
		}
	}

	total, nodesWithKeys := 0, 0
	for _, addr := range cl.Addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		size, err := c.DBSize(ctx).Result()
		c.Close()
		if err != nil {
			t.Fatalf("DBSIZE on %s: %v", addr, err)
		}
		total += int(size)
		if size > 0 {
			nodesWithKeys++
		}
	}
	if total != n {
		t.Errorf("keys across nodes = %d, want %d", total, n)
	}
	if nodesWithKeys < 2 {
		t.Errorf("keys landed on %d node(s), want more than one", nodesWithKeys)
	}
}

func TestNATSRestartKeepsJetStream(t *testing.T) {
	ctx := t.Context()
	storeDir := t.TempDir()
	n := StartNATS(t, storeDir)
	url := n.URL()
	if n.Server() == nil {
		t.Fatal("Server() = nil for a running server")
	}
	nc := n.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream.New: %v", err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     "EVENTS",
		Subjects: []string{"events.>"},
		Storage:  jetstream.FileStorage,
	}); err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	if _, err := js.Publish(ctx, "events.created", []byte("payload")); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	n.Restart(t)
	if n.URL() != url {
		t.Fatalf("URL changed across Restart: %s -> %s", url, n.URL())
	}
	if _, err := os.Stat(filepath.Join(storeDir, "jetstream")); err != nil {
		t.Fatalf("JetStream store not under %s: %v", storeDir, err)
	}

	// The original connection must reconnect to the same port.
	var stream jetstream.Stream
	Eventually(t, 10*time.Second, "the connection to reconnect and read the stream", func() bool {
		if nc.Stats().Reconnects == 0 || !nc.IsConnected() {
			return false
		}
		reqCtx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		s, err := js.Stream(reqCtx, "EVENTS")
		stream = s
		return err == nil
	})
	if msgs := stream.CachedInfo().State.Msgs; msgs != 1 {
		t.Fatalf("stream has %d messages after Restart, want 1", msgs)
	}
	msg, err := stream.GetMsg(ctx, 1)
	if err != nil {
		t.Fatalf("GetMsg(1): %v", err)
	}
	if msg.Subject != "events.created" || string(msg.Data) != "payload" {
		t.Fatalf("message after Restart = %s %q, want events.created %q", msg.Subject, msg.Data, "payload")
	}

	// A fresh connection works too, and Shutdown is idempotent.
	if err := n.Connect(t).Flush(); err != nil {
		t.Fatalf("Flush on new connection: %v", err)
	}
	n.Shutdown(t)
	if n.Server() != nil {
		t.Error("Server() != nil after Shutdown")
	}
	n.Shutdown(t)
}

func TestNATSDefaultStoreDir(t *testing.T) {
	n := StartNATS(t, "")
	if !n.Server().JetStreamEnabled() {
		t.Fatal("JetStream not enabled")
	}
	if err := n.Connect(t).Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

func BenchmarkRedisPing(b *testing.B) {
	c := StartRedis(b).Client(b)
	ctx := b.Context()
	for b.Loop() {
		if err := c.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

func TestMedian(t *testing.T) {
	xs := []float64{3, 1, 2, 10}
	if got := Median(xs); got != 3 {
		t.Fatalf("Median(%v) = %v, want 3 (the upper middle)", xs, got)
	}
	if xs[0] != 3 || xs[3] != 10 {
		t.Fatalf("Median reordered its input: %v", xs)
	}
	if got := Median([]float64{5, 1, 9}); got != 5 {
		t.Fatalf("Median of 5, 1, 9 = %v, want 5", got)
	}
	if got := Median(nil); got != 0 {
		t.Fatalf("Median(nil) = %v, want 0", got)
	}
}

func TestStartRedisSentinel(t *testing.T) {
	t.Parallel()
	s := StartRedisSentinel(t, 2)
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.Addrs})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through the sentinels: %v", err)
	}
	// The failover client found the master the sentinels watch.
	direct := redis.NewClient(&redis.Options{Addr: s.Master})
	t.Cleanup(func() { _ = direct.Close() })
	if v, err := direct.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET on the master: %q, %v; want v", v, err)
	}
}

package testenv

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// clusterBusOffset is the distance between a node's client port and its
	// cluster bus port (Redis's default, as older versions lack cluster-port).
	clusterBusOffset = 10000
	// clusterSlots is the number of hash slots in a Redis Cluster.
	clusterSlots = 16384
	// clusterCreateTimeout bounds `redis-cli --cluster create`.
	clusterCreateTimeout = time.Minute
	// clusterReadyTimeout bounds the wait for cluster_state:ok everywhere.
	clusterReadyTimeout = 30 * time.Second
)

// Cluster is a Redis Cluster of redis-server processes owned by one test:
// masters, and replicas of them when started with ClusterOptions.Replicas.
type Cluster struct {
	// Addrs holds the "127.0.0.1:port" address of every node, masters first
	// as they were started; after a failover a replica may be a master.
	Addrs []string

	replicas int // replicas per master
	nodes    []*redisProc
}

// ClusterOptions shapes a cluster started by StartRedisClusterWith.
type ClusterOptions struct {
	// Masters is the number of masters, at least 3 (redis-cli's minimum).
	Masters int
	// Replicas is the number of replicas of each master; 0 for none.
	Replicas int
	// NodeTimeout is the cluster-node-timeout: how long a master may be
	// unreachable before its replica fails it over. Zero means 2 s.
	NodeTimeout time.Duration
}

// StartRedisCluster starts masters redis-server processes (at least 3, the
// minimum redis-cli accepts) in cluster mode on free ports, joins them with
// `redis-cli --cluster create` without replicas, and waits until every node
// reports cluster_state:ok with all 16384 slots assigned. A cleanup kills
// every node. It fails the test if redis-server or redis-cli is not in PATH
// or the cluster does not form.
func StartRedisCluster(tb testing.TB, masters int) *Cluster {
	tb.Helper()
	return StartRedisClusterWith(tb, ClusterOptions{Masters: masters})
}

// StartRedisClusterWith starts a cluster as StartRedisCluster does, with
// opts.Replicas replicas of each master, and waits, besides, until every
// master has its replicas attached and in sync, so that killing a master
// (KillNode) promotes one of them.
func StartRedisClusterWith(tb testing.TB, opts ClusterOptions) *Cluster {
	tb.Helper()
	if opts.Masters < 3 {
		tb.Fatalf("testenv: start redis cluster: need at least 3 masters, got %d", opts.Masters)
	}
	if opts.Replicas < 0 {
		tb.Fatalf("testenv: start redis cluster: %d replicas per master", opts.Replicas)
	}
	nodeTimeout := opts.NodeTimeout
	if nodeTimeout <= 0 {
		nodeTimeout = 2 * time.Second
	}
	serverBin := lookBinary(tb, "redis-server")
	cliBin := lookBinary(tb, "redis-cli")
	baseDir := tb.TempDir()

	c := &Cluster{replicas: opts.Replicas}
	tb.Cleanup(func() {
		var errs []error
		for _, n := range c.nodes {
			errs = append(errs, n.kill())
		}
		if err := errors.Join(errs...); err != nil {
			tb.Errorf("testenv: cleanup redis cluster: %v", err)
		}
	})

	taken := make(map[int]bool)
	pick := func() (int, error) { return freeClusterPort(taken) }
	extra := func(port int, dir string) []string {
		return []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes-"+strconv.Itoa(port)+".conf"),
			"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
		}
	}
	total := opts.Masters * (1 + opts.Replicas)
	for i := range total {
		proc, err := launchOnFreePort(serverBin, baseDir, pick, extra)
		if err != nil {
			tb.Fatalf("testenv: start redis cluster node %d of %d: %v", i+1, total, err)
		}
		c.nodes = append(c.nodes, proc)
		c.Addrs = append(c.Addrs, proc.addr)
	}

	if err := c.create(cliBin); err != nil {
		tb.Fatalf("testenv: start redis cluster: %v\n%s", err, c.logTails())
	}
	if err := c.waitReady(); err != nil {
		tb.Fatalf("testenv: start redis cluster: %v\n%s", err, c.logTails())
	}
	return c
}

// Client returns a go-redis cluster client for the cluster. The client is
// closed when tb's test ends.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	tb.Cleanup(func() {
		if err := cc.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
			tb.Errorf("testenv: close redis cluster client: %v", err)
		}
	})
	return cc
}

// create joins the nodes into a cluster with redis-cli.
func (c *Cluster) create(cliBin string) error {
	ctx, cancel := context.WithTimeout(context.Background(), clusterCreateTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(c.replicas), "--cluster-yes")
	out, err := exec.CommandContext(ctx, cliBin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", cliBin, strings.Join(args, " "), err, out)
	}
	return nil
}

// waitReady waits until every node reports a healthy cluster that knows all
// nodes and has every slot assigned, and every replica is in sync with its
// master (a replica still loading would not be promoted).
func (c *Cluster) waitReady() error {
	err := waitUntil(clusterReadyTimeout, nil, func() error {
		for _, n := range c.nodes {
			if n.exited() {
				return fmt.Errorf("%w: node %s exited (%v)", errGiveUp, n.addr, n.waitErr)
			}
			info, err := respCommand(n.addr, "CLUSTER", "INFO")
			if err != nil {
				return fmt.Errorf("node %s: %w", n.addr, err)
			}
			fields := parseInfo(info)
			want := map[string]string{
				"cluster_state":          "ok",
				"cluster_slots_assigned": strconv.Itoa(clusterSlots),
				"cluster_known_nodes":    strconv.Itoa(len(c.nodes)),
			}
			for k, v := range want {
				if fields[k] != v {
					return fmt.Errorf("node %s: %s is %q, want %q", n.addr, k, fields[k], v)
				}
			}
		}
		return c.replicasInSync()
	})
	if err != nil {
		return fmt.Errorf("wait for cluster_state:ok: %w", err)
	}
	return nil
}

// logTails returns the end of every node's log.
func (c *Cluster) logTails() string {
	var b strings.Builder
	for _, n := range c.nodes {
		b.WriteString(logTail(n.logPath))
		b.WriteByte('\n')
	}
	return b.String()
}

// parseInfo parses the "key:value" lines of an INFO-style reply.
func parseInfo(info string) map[string]string {
	fields := make(map[string]string)
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok {
			fields[k] = v
		}
	}
	return fields
}

// freeClusterPort picks a free port whose cluster bus port (port+10000) is
// also free and valid, avoiding the ports recorded in taken, and records both.
func freeClusterPort(taken map[int]bool) (int, error) {
	const tries = 200
	for range tries {
		port, err := freePort()
		if err != nil {
			return 0, err
		}
		bus := port + clusterBusOffset
		if bus > 65535 || taken[port] || taken[bus] || !portFree(bus) {
			continue
		}
		taken[port], taken[bus] = true, true
		return port, nil
	}
	return 0, fmt.Errorf("no free port with a free cluster bus port (+%d) after %d tries", clusterBusOffset, tries)
}

package testenv

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id       string
	addr     string // "ip:port", without the bus port
	flags    []string
	masterID string // "-" for a master
	slots    [][2]int
}

// has reports whether the node carries flag (master, slave, fail, fail?…).
func (n clusterNode) has(flag string) bool {
	for _, f := range n.flags {
		if f == flag {
			return true
		}
	}
	return false
}

// serves reports whether the node is a master that owns slot.
func (n clusterNode) serves(slot int) bool {
	if !n.has("master") {
		return false
	}
	for _, r := range n.slots {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

// parseClusterNodes parses a CLUSTER NODES reply. Slots being migrated
// ("[…]") are left out: a test cluster never migrates.
func parseClusterNodes(reply string) ([]clusterNode, error) {
	var nodes []clusterNode
	for line := range strings.Lines(reply) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 8 {
			return nil, fmt.Errorf("cluster nodes: short line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := clusterNode{id: f[0], addr: addr, flags: strings.Split(f[2], ","), masterID: f[3]}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue
			}
			lo, hi, isRange := strings.Cut(s, "-")
			if !isRange {
				hi = lo
			}
			a, errA := strconv.Atoi(lo)
			b, errB := strconv.Atoi(hi)
			if errA != nil || errB != nil {
				return nil, fmt.Errorf("cluster nodes: bad slots %q in %q", s, line)
			}
			n.slots = append(n.slots, [2]int{a, b})
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// live returns the nodes whose process still runs.
func (c *Cluster) live() []*redisProc {
	var out []*redisProc
	for _, n := range c.nodes {
		if !n.exited() {
			out = append(out, n)
		}
	}
	return out
}

// view returns the cluster as the first live node that answers sees it.
func (c *Cluster) view() ([]clusterNode, error) {
	var lastErr error = fmt.Errorf("no node of the cluster is running")
	for _, n := range c.live() {
		reply, err := respCommand(n.addr, "CLUSTER", "NODES")
		if err != nil {
			lastErr = fmt.Errorf("node %s: %w", n.addr, err)
			continue
		}
		return parseClusterNodes(reply)
	}
	return nil, lastErr
}

// replicasInSync reports an error until every master with slots has
// c.replicas replicas attached, each with its replication link up and no
// sync in progress.
func (c *Cluster) replicasInSync() error {
	if c.replicas == 0 {
		return nil
	}
	nodes, err := c.view()
	if err != nil {
		return err
	}
	attached := map[string]int{}
	for _, n := range nodes {
		if n.has("slave") && !n.has("fail") && !n.has("fail?") {
			attached[n.masterID]++
		}
	}
	for _, n := range nodes {
		if n.has("master") && len(n.slots) > 0 && attached[n.id] != c.replicas {
			return fmt.Errorf("master %s has %d replicas, want %d", n.addr, attached[n.id], c.replicas)
		}
	}
	for _, n := range nodes {
		if !n.has("slave") {
			continue
		}
		info, err := respCommand(n.addr, "INFO", "replication")
		if err != nil {
			return fmt.Errorf("replica %s: %w", n.addr, err)
		}
		f := parseInfo(info)
		if f["master_link_status"] != "up" || f["master_sync_in_progress"] != "0" {
			return fmt.Errorf("replica %s: link %q, sync in progress %q", n.addr, f["master_link_status"], f["master_sync_in_progress"])
		}
	}
	return nil
}

// Slot returns the hash slot of key (CLUSTER KEYSLOT), e.g. "{acme}".
func (c *Cluster) Slot(key string) (int, error) {
	var lastErr error = fmt.Errorf("no node of the cluster is running")
	for _, n := range c.live() {
		reply, err := respCommand(n.addr, "CLUSTER", "KEYSLOT", key)
		if err != nil {
			lastErr = fmt.Errorf("node %s: %w", n.addr, err)
			continue
		}
		slot, err := strconv.Atoi(reply)
		if err != nil {
			return 0, fmt.Errorf("cluster keyslot %s: %q: %w", key, reply, err)
		}
		return slot, nil
	}
	return 0, lastErr
}

// MasterOf returns the address of the master that, as the cluster sees it
// now, serves key's slot (a master just killed stays so until its replica
// takes over).
func (c *Cluster) MasterOf(key string) (string, error) {
	slot, err := c.Slot(key)
	if err != nil {
		return "", err
	}
	nodes, err := c.view()
	if err != nil {
		return "", err
	}
	for _, n := range nodes {
		if n.serves(slot) {
			return n.addr, nil
		}
	}
	return "", fmt.Errorf("no master serves slot %d of %s", slot, key)
}

// KillNode kills the node at addr with SIGKILL, as a crash would (nothing
// is saved; writes its replicas have not received are lost), and waits
// until its port is closed.
func (c *Cluster) KillNode(tb testing.TB, addr string) {
	tb.Helper()
	for _, n := range c.nodes {
		if n.addr == addr {
			if err := n.kill(); err != nil {
				tb.Fatalf("testenv: kill redis cluster node: %v", err)
			}
			return
		}
	}
	tb.Fatalf("testenv: kill redis cluster node: no node at %s", addr)
}

// WaitFailover waits until every running node reports cluster_state:ok and
// key's slot is served by a master other than old, and returns that
// master's address. It fails the test after timeout.
func (c *Cluster) WaitFailover(tb testing.TB, key, old string, timeout time.Duration) string {
	tb.Helper()
	var master string
	err := waitUntil(timeout, nil, func() error {
		for _, n := range c.live() {
			info, err := respCommand(n.addr, "CLUSTER", "INFO")
			if err != nil {
				return fmt.Errorf("node %s: %w", n.addr, err)
			}
			if s := parseInfo(info)["cluster_state"]; s != "ok" {
				return fmt.Errorf("node %s: cluster_state %q", n.addr, s)
			}
		}
		m, err := c.MasterOf(key)
		if err != nil {
			return err
		}
		if m == old {
			return fmt.Errorf("%s still served by %s", key, old)
		}
		master = m
		return nil
	})
	if err != nil {
		tb.Fatalf("testenv: redis cluster failover of %s: %v\n%s", key, err, c.logTails())
	}
	return master
}

package integration

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/testenv"
)

// natsNode is one nats-server process of a natsCluster. Its name, ports and
// store directory stay the same across stop and start.
type natsNode struct {
	name        string
	port        int
	clusterPort int
	monitorPort int // the HTTP monitoring endpoint (/jsz)
	storeDir    string
	cmd         *exec.Cmd // nil while stopped
	out         *testenv.Buffer
}

// addr returns the node's client address, "127.0.0.1:port".
func (n *natsNode) addr() string { return "127.0.0.1:" + strconv.Itoa(n.port) }

// natsCluster is a cluster of nats-server processes with JetStream, each
// routed to the others, owned by one test.
type natsCluster struct {
	bin   string
	nodes []*natsNode
}

// startNATSCluster starts size processes of the nats-server binary bin
// (n1, n2, …), each with JetStream, its own store directory, and a client
// and a cluster port picked free, in a cluster named fleet, and waits until
// every one accepts connections. A cleanup stops them all.
func startNATSCluster(tb testing.TB, bin string, size int) *natsCluster {
	tb.Helper()
	c := &natsCluster{bin: bin}
	for i := range size {
		c.nodes = append(c.nodes, &natsNode{
			name:        "n" + strconv.Itoa(i+1),
			port:        testenv.FreePort(tb),
			clusterPort: testenv.FreePort(tb),
			monitorPort: testenv.FreePort(tb),
			storeDir:    tb.TempDir(),
		})
	}
	tb.Cleanup(func() {
		for _, n := range c.nodes {
			c.stop(n)
		}
	})
	for _, n := range c.nodes {
		c.start(tb, n)
	}
	return c
}

// URL returns every node's client URL, comma-separated, as NATS_URL takes
// them.
func (c *natsCluster) URL() string {
	var urls []string
	for _, n := range c.nodes {
		urls = append(urls, "nats://"+n.addr())
	}
	return strings.Join(urls, ",")
}

// node returns the node named name (a stream's Cluster.Leader).
func (c *natsCluster) node(tb testing.TB, name string) *natsNode {
	tb.Helper()
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	tb.Fatalf("no nats-server named %q", name)
	return nil
}

// start runs the node's process and waits until it accepts connections.
func (c *natsCluster) start(tb testing.TB, n *natsNode) {
	tb.Helper()
	var routes []string
	for _, o := range c.nodes {
		if o != n {
			routes = append(routes, "nats://127.0.0.1:"+strconv.Itoa(o.clusterPort))
		}
	}
	n.out = &testenv.Buffer{}
	n.cmd = exec.Command(c.bin, "-js", "-a", "127.0.0.1", "-p", strconv.Itoa(n.port),
		"-sd", n.storeDir, "-n", n.name, "-cluster_name", "fleet", "-m", strconv.Itoa(n.monitorPort),
		"-cluster", "nats://127.0.0.1:"+strconv.Itoa(n.clusterPort),
		"-routes", strings.Join(routes, ","))
	n.cmd.Stdout, n.cmd.Stderr = n.out, n.out
	must(tb, n.cmd.Start(), "start nats-server %s", n.name)
	testenv.Eventually(tb, 10*time.Second, "nats-server "+n.name+" on "+n.addr(), func() bool {
		conn, err := net.DialTimeout("tcp", n.addr(), 100*time.Millisecond)
		if err != nil {
			return false
		}
		_ = conn.Close()
		return true
	})
}

// metaLeader returns the name of the cluster's metadata leader, as a
// running node's /jsz reports it ("" when none is elected).
func (c *natsCluster) metaLeader(tb testing.TB) string {
	tb.Helper()
	for _, n := range c.nodes {
		if n.cmd == nil {
			continue
		}
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(n.monitorPort) + "/jsz")
		if err != nil {
			continue
		}
		var jsz struct {
			Meta struct {
				Leader string `json:"leader"`
			} `json:"meta_cluster"`
		}
		err = json.NewDecoder(resp.Body).Decode(&jsz)
		_ = resp.Body.Close()
		if err == nil {
			return jsz.Meta.Leader
		}
	}
	return ""
}

// kill sends the node SIGKILL, as a crash, and waits for it to exit.
func (c *natsCluster) kill(n *natsNode) {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	_ = n.cmd.Wait()
	n.cmd = nil
}

// stop sends the node SIGTERM (a graceful shutdown, as an orchestrator
// stops a server) and waits for it to exit. Stopping a stopped node does
// nothing.
func (c *natsCluster) stop(n *natsNode) {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	_ = n.cmd.Wait()
	n.cmd = nil
}

// logs returns the end of every node's output, for a failure.
func (c *natsCluster) logs() string {
	var b strings.Builder
	for _, n := range c.nodes {
		s := n.out.String()
		if len(s) > 4000 {
			s = s[len(s)-4000:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", n.name, s)
	}
	return b.String()
}

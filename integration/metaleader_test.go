package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/testenv"
)

// metaLeaderRounds is how many crashes BenchmarkMetaLeaderCrash measures,
// each on a cluster of its own.
const metaLeaderRounds = 3

// BenchmarkMetaLeaderCrash measures how long a worker stops forwarding
// when the NATS cluster's metadata leader crashes. Each round starts three
// nats-server processes in a cluster, a redis-server and one worker
// (THROTTLER_STREAM_REPLICAS=3), publishes 50 jobs a second of a tenant
// far under its limit (with ids, retried until stored), and after 5 s
// sends the metadata leader SIGKILL, starting it again 8 s later. The
// longest gap between two forwards stored in <STREAM>_FORWARD, from 1 s
// before the crash on, is the stop; a crash that leaves the leaders the
// worker uses in place stops nothing. Run it with
//
//	go test -run '^$' -bench MetaLeaderCrash -benchtime 1x -v ./integration/
func BenchmarkMetaLeaderCrash(b *testing.B) {
	bin, natsServer := buildThrottler(b), buildNATSServer(b)
	for range b.N {
		var gaps []time.Duration
		for round := range metaLeaderRounds {
			gap, leader := metaLeaderCrash(b, bin, natsServer)
			b.Logf("round %d: killed %s, the metadata leader; forwards stopped for %s", round+1, leader, gap.Round(time.Millisecond))
			gaps = append(gaps, gap)
		}
		slices.Sort(gaps)
		b.ReportMetric(gaps[len(gaps)/2].Seconds(), "median-stop-s")
		b.ReportMetric(gaps[len(gaps)-1].Seconds(), "longest-stop-s")
	}
}

// metaLeaderCrash runs one round of BenchmarkMetaLeaderCrash and returns
// the longest gap between forwards and the name of the node killed.
func metaLeaderCrash(b *testing.B, bin, natsServer string) (time.Duration, string) {
	cluster := startNATSCluster(b, natsServer, 3)
	rs := testenv.StartRedis(b)
	vars := map[string]string{"NATS_URL": cluster.URL(), "REDIS_URL": rs.URL(), "THROTTLER_STREAM_REPLICAS": "3",
		"THROTTLER_TENANT_LIMITS": "acme=1000/s", "THROTTLER_LOG_LEVEL": "info"}
	cmd, _, stderr := throttlerCmd(context.Background(), bin, vars)
	must(b, cmd.Start(), "start throttler")
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	testenv.Eventually(b, 60*time.Second, "worker running", func() bool { return strings.Contains(stderr.String(), "worker running") })
	nc, err := nats.Connect(cluster.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	must(b, err, "connect")
	defer nc.Close()
	js, err := jetstream.New(nc)
	must(b, err, "jetstream")

	ctx, cancel := context.WithCancel(context.Background())
	published := make(chan struct{})
	go func() {
		defer close(published)
		for i := 0; ctx.Err() == nil; i++ {
			for ctx.Err() == nil { // retried until stored: the id stores it once
				pctx, done := context.WithTimeout(ctx, 2*time.Second)
				_, err := js.Publish(pctx, "jobs.acme.x", []byte(fmt.Sprint(i)), jetstream.WithMsgID(fmt.Sprint("job-", i)))
				done()
				if err == nil {
					break
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	time.Sleep(5 * time.Second)
	var leader string
	testenv.Eventually(b, 10*time.Second, "a metadata leader", func() bool { leader = cluster.metaLeader(b); return leader != "" })
	node := cluster.node(b, leader)
	crash := time.Now()
	cluster.kill(node)
	time.Sleep(8 * time.Second)
	cluster.start(b, node)
	time.Sleep(8 * time.Second)
	cancel()
	<-published

	// The forwards as stored, each with the time the stream took it.
	var stored []time.Time
	rctx, done := context.WithTimeout(context.Background(), 30*time.Second)
	defer done()
	oc, err := js.OrderedConsumer(rctx, "JOBS_FORWARD", jetstream.OrderedConsumerConfig{})
	must(b, err, "read the forwards")
	for {
		batch, err := oc.Fetch(500, jetstream.FetchMaxWait(time.Second))
		must(b, err, "fetch the forwards")
		n := 0
		for m := range batch.Messages() {
			md, err := m.Metadata()
			must(b, err, "a forward's metadata")
			stored = append(stored, md.Timestamp)
			n++
		}
		if n == 0 {
			break
		}
	}
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, "level=WARN") {
			b.Log(line) // what the worker saw, with -v
		}
	}
	b.Logf("crash at %s", crash.Format(time.RFC3339Nano))
	var gap time.Duration
	for i := 1; i < len(stored); i++ {
		if stored[i].After(crash.Add(-time.Second)) {
			gap = max(gap, stored[i].Sub(stored[i-1]))
		}
	}
	return gap, leader
}

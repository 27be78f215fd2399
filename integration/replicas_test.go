package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/testenv"
)

// TestStreamReplicas: on a three-server NATS cluster, a worker with
// THROTTLER_STREAM_REPLICAS=3 creates the jobs stream at 3 replicas, and
// the output streams and the limits bucket with it; a worker creating a
// stream of one replica there warns that its jobs sit on one server; a
// worker asking for 3 replicas of a stream that exists with one warns
// that the setting did not apply; and on a server that is not clustered,
// 3 stops the start with a message naming the variable (exit 2), not a
// retry for ever.
func TestStreamReplicas(t *testing.T) {
	bin, natsServer := buildThrottler(t), buildNATSServer(t)
	cluster := startNATSCluster(t, natsServer, 3)
	rs := testenv.StartRedis(t)
	vars := map[string]string{
		"NATS_URL": cluster.URL(), "REDIS_URL": rs.URL(),
		"THROTTLER_STREAM_REPLICAS": "3", "THROTTLER_LOG_LEVEL": "info",
	}
	nc, err := nats.Connect(cluster.URL())
	must(t, err, "connect")
	defer nc.Close()
	js, err := jetstream.New(nc)
	must(t, err, "jetstream")
	replicas := func(stream string) int {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return 0
		}
		return s.CachedInfo().Config.Replicas
	}

	run := func(vars map[string]string) *testenv.Buffer {
		cmd, _, stderr := throttlerCmd(context.Background(), bin, vars)
		must(t, cmd.Start(), "start throttler")
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		// A three-server cluster under a loaded machine can take a while
		// to elect its leaders; the log says what the worker waited for.
		defer func() {
			if t.Failed() {
				t.Logf("worker's log:\n%s", stderr)
			}
		}()
		testenv.Eventually(t, 2*time.Minute, "worker running", func() bool {
			return strings.Contains(stderr.String(), "worker running")
		})
		return stderr
	}
	log := run(vars)
	for _, s := range []string{"JOBS", "JOBS_FORWARD", "JOBS_DLQ", "KV_throttler_limits"} {
		if got := replicas(s); got != 3 {
			t.Errorf("stream %s: %d replicas, want 3", s, got)
		}
	}
	if strings.Contains(log.String(), "one replica") {
		t.Errorf("a stream of 3 replicas warned of one:\n%s", log)
	}

	// Another fleet's stream on the same cluster, at the default.
	one := map[string]string{"NATS_URL": cluster.URL(), "REDIS_URL": rs.URL(), "THROTTLER_STREAM": "SOLO",
		"THROTTLER_SUBJECTS": "solo.>", "THROTTLER_CONSUMER": "solo", "THROTTLER_SCHEDULE_SUBJECT": "solosched", "THROTTLER_LOG_LEVEL": "info"}
	log = run(one)
	if got := replicas("SOLO"); got != 1 {
		t.Errorf("stream SOLO: %d replicas, want the default 1", got)
	}
	if !strings.Contains(log.String(), "stream SOLO has one replica on a clustered NATS") {
		t.Errorf("a stream of one replica on a cluster: no warning\n%s", log)
	}

	// The setting asks for 3, but SOLO exists with one: left as it is, and
	// the worker says the setting did not apply.
	three := map[string]string{"THROTTLER_STREAM_REPLICAS": "3"}
	for k, v := range one {
		three[k] = v
	}
	log = run(three)
	if got := replicas("SOLO"); got != 1 {
		t.Errorf("existing stream SOLO: %d replicas after a worker asked for 3, want it left at 1", got)
	}
	if !strings.Contains(log.String(), "THROTTLER_STREAM_REPLICAS=3 applies to a stream the worker creates: stream SOLO exists with 1") {
		t.Errorf("THROTTLER_STREAM_REPLICAS=3 against an existing stream of 1: no warning\n%s", log)
	}

	single := testenv.StartNATS(t, "")
	status, _, errOut := runCLI(t, bin, map[string]string{"NATS_URL": single.URL(), "REDIS_URL": rs.URL(), "THROTTLER_STREAM_REPLICAS": "3"})
	if status != 2 || !strings.Contains(errOut, "THROTTLER_STREAM_REPLICAS=3 needs a clustered nats-server") {
		t.Errorf("3 replicas on a single server: status %d, want 2 naming THROTTLER_STREAM_REPLICAS\n%s", status, errOut)
	}
}

// TestWorkerWaitsForServersToPlaceItsStream: on a cluster of two servers,
// JetStream cannot place a stream of 3 replicas ("no suitable peers for
// placement", status 400, as a cluster still electing its leaders
// answers): the worker waits, saying why, rather than stopping as on a
// setting to change or giving up message schedules, and starts once a
// third server has joined.
func TestWorkerWaitsForServersToPlaceItsStream(t *testing.T) {
	bin, natsServer := buildThrottler(t), buildNATSServer(t)
	cluster := startNATSCluster(t, natsServer, 2)
	testenv.Eventually(t, time.Minute, "a metadata leader", func() bool { return cluster.metaLeader(t) != "" })
	nc, err := nats.Connect(cluster.URL())
	must(t, err, "connect")
	defer nc.Close()
	js, err := jetstream.New(nc)
	must(t, err, "jetstream")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "PROBE", Subjects: []string{"probe.>"}, Replicas: 3})
	cancel()
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10005 {
		t.Fatalf("a stream of 3 replicas on two servers: %v, want no suitable peers for placement (10005)", err)
	}
	rs := testenv.StartRedis(t)
	vars := map[string]string{
		"NATS_URL": cluster.URL(), "REDIS_URL": rs.URL(),
		"THROTTLER_STREAM_REPLICAS": "3", "THROTTLER_LOG_LEVEL": "info",
	}
	cmd, _, stderr := throttlerCmd(context.Background(), bin, vars)
	must(t, cmd.Start(), "start throttler")
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	defer func() {
		if t.Failed() {
			t.Logf("worker's log:\n%s", stderr)
		}
	}()
	testenv.Eventually(t, time.Minute, "the worker waiting for placement", func() bool {
		return strings.Contains(stderr.String(), "cannot place the jobs stream JOBS's replicas now")
	})
	select {
	case err := <-exited:
		t.Fatalf("the worker exited while the stream could not be placed: %v", err)
	default:
	}
	third := &natsNode{name: "n3", port: testenv.FreePort(t), clusterPort: testenv.FreePort(t), monitorPort: testenv.FreePort(t), storeDir: t.TempDir()}
	cluster.nodes = append(cluster.nodes, third)
	cluster.start(t, third)
	testenv.Eventually(t, 2*time.Minute, "worker running", func() bool {
		return strings.Contains(stderr.String(), "worker running")
	})
	if s := stderr.String(); strings.Contains(s, "deferring with NAK only") {
		t.Errorf("a placement refused gave up message schedules:\n%s", s)
	}
}

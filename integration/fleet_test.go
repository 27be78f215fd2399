package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/ops"
	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/subject"
)

// The fleet benchmark's timeline, from the first publish.
const (
	fleetPublishFor  = 30 * time.Second // publishing at 3× the limits
	fleetNATSStopAt  = 8 * time.Second  // SIGTERM to the jobs stream's leader
	fleetNATSStartAt = 12 * time.Second // the same server started again
	fleetRedisKillAt = 20 * time.Second // SIGKILL to a tenant's Redis master, once NATS's window closed
	// fleetSettle is how long after a cluster recovered its failover
	// window lasts: jobs deferred with a backoff during the outage come
	// back within it.
	fleetSettle = 5 * time.Second
	// fleetRateFrom leaves the start out of the clean rate: the first
	// second runs each tenant's burst.
	fleetRateFrom = 3 * time.Second
	// fleetWorkers is the number of worker processes.
	fleetWorkers = 4
)

// fleetTenants are the benchmark's tenants, each published at 3× its limit.
// Their names hash to slots of different thirds (8903, 1194, 12553), so
// that redis-cli's even split puts each on a master of its own and a
// master's death shows beside tenants it does not hold.
var fleetTenants = []fleetTenant{{"slow", 20}, {"mid", 50}, {"fast", 100}}

// BenchmarkFleet runs the fleet on clustered servers, every part a process
// as in production: three nats-server processes in a cluster (built from
// the module; the jobs stream with 3 replicas, the forward and dead-letter
// streams the workers create with as many), a Redis Cluster of 3 masters
// with a replica each (cluster-node-timeout 1 s), and four throttler
// binaries in cluster mode. Three tenants are
// published at 3× their limits (20/s, 50/s, 100/s) for 30 s, with retries,
// so the publisher loses nothing. At 8 s the jobs stream's leader gets
// SIGTERM and is started again at 12 s; at 20 s the Redis master of
// {fast} gets SIGKILL and its replica takes over. The ledger checks that
// every acknowledged job was forwarded or dead-lettered, counts jobs
// forwarded twice, measures each tenant's rate outside the failover
// windows, and what each was admitted across each window beyond its
// limit × window + burst. Run it with (-v prints the whole report, with
// each tenant's forwards per second)
//
//	go test -run '^$' -bench Fleet -benchtime 1x -timeout 20m -v ./integration/
func BenchmarkFleet(b *testing.B) {
	throttler, natsServer := buildThrottler(b), buildNATSServer(b)
	for i := 0; i < b.N; i++ {
		rep := runFleet(b, throttler, natsServer)
		b.Logf("\n%s", rep)
		rep.report(b)
	}
}

// fleetWorker is one throttler process of the fleet.
type fleetWorker struct {
	cmd     *exec.Cmd
	stderr  *testenv.Buffer
	metrics string        // host:port of /metrics
	done    chan struct{} // closed when the process exited
	err     error         // its exit, once done is closed
}

// exited returns how the worker exited, or "" while it runs.
func (w *fleetWorker) exited() string {
	select {
	case <-w.done:
		return fmt.Sprintf("exited: %v", w.err)
	default:
		return ""
	}
}

// runFleet runs the scenario of BenchmarkFleet once and reports it.
func runFleet(b *testing.B, throttler, natsServer string) *fleetReport {
	b.Helper()
	natsc := startNATSCluster(b, natsServer, 3)
	rc := testenv.StartRedisClusterWith(b, testenv.ClusterOptions{Masters: 3, Replicas: 1, NodeTimeout: time.Second})

	nc, err := nats.Connect(natsc.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	must(b, err, "connect")
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(maxAsyncPublishes), jetstream.WithPublishAsyncTimeout(5*time.Second))
	must(b, err, "jetstream")
	createJobsStream(b, js)

	var limits []string
	for _, t := range fleetTenants {
		limits = append(limits, fmt.Sprintf("%s=%g/s", t.name, t.limit))
	}
	vars := map[string]string{
		"NATS_URL":                natsc.URL(),
		"THROTTLER_REDIS_MODE":    "cluster",
		"REDIS_URL":               "redis://" + rc.Addrs[0] + "?addr=" + strings.Join(rc.Addrs[1:], "&addr="),
		"THROTTLER_TENANT_LIMITS": strings.Join(limits, ","),
		"THROTTLER_LOG_LEVEL":     "warn",
	}
	workers := startFleetWorkers(b, throttler, vars)
	// The workers created the output streams, as replicated as the jobs.
	for _, name := range []string{"JOBS_FORWARD", "JOBS_DLQ"} {
		if r := streamReplicas(b, js, name); r != 3 {
			b.Errorf("the workers created %s with %d replicas, want the jobs stream's 3", name, r)
		}
	}
	ledger := startFleetLedger(b, nc, js, "JOBS_FORWARD", "JOBS_DLQ")

	rep := &fleetReport{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := newFleetPublisher(js)
	rep.start = time.Now()
	published := make(chan struct{})
	go func() {
		defer close(published)
		pub.run(ctx, fleetTenants, fleetPublishFor)
	}()
	at := func(d time.Duration) { time.Sleep(time.Until(rep.start.Add(d))) }

	// The jobs stream's leader leaves, gracefully, and comes back.
	at(fleetNATSStopAt)
	leader := streamLeader(b, js, "JOBS")
	rep.natsLeader = leader
	node := natsc.node(b, leader)
	natsStop := time.Now()
	natsc.stop(node)
	at(fleetNATSStartAt)
	natsc.start(b, node)
	testenv.Eventually(b, 60*time.Second, "JOBS with every replica current", func() bool { return replicasCurrent(js, "JOBS", 3) })
	rep.natsRecovered = time.Since(natsStop)
	rep.windows = append(rep.windows, fleetWindow{name: "nats " + leader, from: natsStop, to: time.Now().Add(fleetSettle)})
	if newLeader, _ := tryStreamLeader(js, "JOBS"); newLeader != "" {
		rep.natsNewLeader = newLeader
	}

	// The Redis master of {fast} dies; its replica takes over.
	at(fleetRedisKillAt)
	const key = "{fast}"
	master, err := rc.MasterOf(key)
	must(b, err, "the master of %s", key)
	for _, t := range fleetTenants {
		if m, err := rc.MasterOf("{" + t.name + "}"); err == nil && m == master {
			rep.redisTenants = append(rep.redisTenants, t.name)
		}
	}
	redisKill := time.Now()
	rc.KillNode(b, master)
	rc.WaitFailover(b, key, master, 30*time.Second)
	rep.redisRecovered = time.Since(redisKill)
	rep.windows = append(rep.windows, fleetWindow{name: "redis " + master, from: redisKill, to: time.Now().Add(fleetSettle)})

	<-published
	acked, failed := pub.wait()
	rep.published, rep.unacked = len(acked), len(failed)
	rep.retries, rep.pubDuplicates = pub.retries.Load(), pub.duplicates.Load()
	rep.publishedFor = time.Since(rep.start)

	// Every acknowledged job forwarded or dead-lettered: the backlog
	// drains at the limits, about twice the publishing time.
	deadline := time.Now().Add(2*fleetPublishFor + 2*time.Minute)
	for ledger.missing(acked) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Second) // polling the ledger, bounded by deadline
	}
	rep.drained = time.Since(rep.start)
	// Then the workers settle: their consumers idle, no schedule waiting.
	settleBy := time.Now().Add(30 * time.Second)
	for rep.busy = fleetBusy(js); rep.busy != "" && time.Now().Before(settleBy); rep.busy = fleetBusy(js) {
		time.Sleep(100 * time.Millisecond) // polling, bounded by settleBy
	}
	rep.account = ledger.account(acked)
	rep.forwards = ledger.forwardTimesOf()
	rep.counters = scrapeFleet(workers)
	for i, w := range workers {
		if e := w.exited(); e != "" {
			rep.exited = append(rep.exited, fmt.Sprintf("worker %d %s", i, e))
		}
		rep.warnings = append(rep.warnings, fleetWarnings(i, w.stderr.String())...)
	}
	if len(rep.account.lost) > 0 {
		b.Errorf("%d acknowledged jobs neither forwarded nor dead-lettered, e.g. %v", len(rep.account.lost), rep.account.lost[:min(10, len(rep.account.lost))])
	}
	if rep.busy != "" {
		b.Errorf("the workers did not settle within 30 s of the last job accounted for: %s", rep.busy)
	}
	if rep.account.storedTwice > 0 {
		b.Errorf("%d jobs stored twice in JOBS_FORWARD", rep.account.storedTwice)
	}
	if len(failed) > 0 {
		b.Errorf("%d jobs never acknowledged to the publisher", len(failed))
	}
	return rep
}

// createJobsStream creates the jobs stream with 3 replicas, retrying while
// the cluster elects its meta leader. The workers add what they need (the
// schedule subjects, message schedules), and create the forward and
// dead-letter streams with its replicas.
func createJobsStream(tb testing.TB, js jetstream.JetStream) {
	tb.Helper()
	sc := jetstream.StreamConfig{
		Name: "JOBS", Subjects: []string{"jobs.>"}, Replicas: 3, AllowDirect: true,
		Storage: jetstream.FileStorage, Retention: jetstream.LimitsPolicy,
		// The publisher's retries stop within it (fleetGiveUp).
		Duplicates: 2 * time.Minute,
	}
	var err error
	testenv.Eventually(tb, 30*time.Second, "stream JOBS created", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = js.CreateStream(ctx, sc)
		return err == nil
	})
}

// streamReplicas returns the replicas stream is configured with.
func streamReplicas(tb testing.TB, js jetstream.JetStream, stream string) int {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	must(tb, err, "stream %s", stream)
	return s.CachedInfo().Config.Replicas
}

// startFleetWorkers starts fleetWorkers throttler processes with vars, each
// serving its metrics on a port of its own, and waits until all are ready.
// A cleanup stops them.
func startFleetWorkers(tb testing.TB, bin string, vars map[string]string) []*fleetWorker {
	tb.Helper()
	var ws []*fleetWorker
	for range fleetWorkers {
		w := &fleetWorker{metrics: "127.0.0.1:" + strconv.Itoa(testenv.FreePort(tb)), done: make(chan struct{})}
		v := map[string]string{"THROTTLER_METRICS_ADDR": w.metrics}
		for k, x := range vars {
			v[k] = x
		}
		w.cmd, _, w.stderr = throttlerCmd(context.Background(), bin, v)
		must(tb, w.cmd.Start(), "start throttler")
		go func() {
			w.err = w.cmd.Wait()
			close(w.done)
		}()
		tb.Cleanup(func() {
			_ = w.cmd.Process.Signal(syscall.SIGTERM)
			<-w.done
		})
		ws = append(ws, w)
	}
	for i, w := range ws {
		testenv.Eventually(tb, 60*time.Second, fmt.Sprintf("worker %d ready", i), func() bool {
			resp, err := http.Get("http://" + w.metrics + "/readyz")
			if err != nil {
				return false
			}
			_ = resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
	}
	return ws
}

// streamLeader returns the name of the server leading stream.
func streamLeader(tb testing.TB, js jetstream.JetStream, stream string) string {
	tb.Helper()
	var leader string
	testenv.Eventually(tb, 30*time.Second, stream+" has a leader", func() bool {
		leader, _ = tryStreamLeader(js, stream)
		return leader != ""
	})
	return leader
}

// tryStreamLeader returns the name of the server leading stream, if any.
func tryStreamLeader(js jetstream.JetStream, stream string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return "", fmt.Errorf("stream %s: %w", stream, err)
	}
	info := s.CachedInfo()
	if info.Cluster == nil {
		return "", errors.New("stream " + stream + " has no cluster info")
	}
	return info.Cluster.Leader, nil
}

// replicasCurrent reports whether stream has a leader and its other
// replicas - 1 replicas all online and current.
func replicasCurrent(js jetstream.JetStream, stream string, replicas int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return false
	}
	c := s.CachedInfo().Cluster
	if c == nil || c.Leader == "" || len(c.Replicas) != replicas-1 {
		return false
	}
	for _, r := range c.Replicas {
		if !r.Current || r.Offline {
			return false
		}
	}
	return true
}

// fleetBusy says what the workers still have to do, or "": a consumer of
// theirs (jobs, bundles, fast-lane copies; one not there has nothing) with
// jobs pending or awaiting an ack, or moved jobs waiting in the default
// schedule subjects.
func fleetBusy(js jetstream.JetStream) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, name := range []string{"throttler", "throttler_bundles", "throttler_fast"} {
		c, err := js.Consumer(ctx, "JOBS", name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue
		}
		if err != nil {
			return fmt.Sprintf("consumer %s: %v", name, err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			return fmt.Sprintf("consumer %s: %v", name, err)
		}
		if info.NumPending > 0 || info.NumAckPending > 0 {
			return fmt.Sprintf("consumer %s: %d pending, %d awaiting an ack", name, info.NumPending, info.NumAckPending)
		}
	}
	waiting, err := ops.WaitingInSchedules(ctx, js, "JOBS", subject.Schedules("sched"))
	if err != nil {
		return fmt.Sprintf("schedules: %v", err)
	}
	if waiting > 0 {
		return fmt.Sprintf("%d moved jobs wait in schedules", waiting)
	}
	return ""
}

// scrapeFleet sums the workers' counters (name{labels} → value); a worker
// that does not answer is left out.
func scrapeFleet(ws []*fleetWorker) map[string]float64 {
	sum := map[string]float64{}
	for _, w := range ws {
		m, err := scrape(w.metrics)
		if err != nil {
			continue
		}
		for k, v := range m {
			sum[k] += v
		}
	}
	return sum
}

// fleetWarnings returns the distinct messages of a worker's log lines
// (warn level and above), each with how often it was logged.
func fleetWarnings(worker int, log string) []string {
	counts := map[string]int{}
	var order []string
	for line := range strings.Lines(log) {
		msg := line
		if i := strings.Index(line, "msg="); i >= 0 {
			msg = line[i:]
			if j := strings.Index(msg, " "); j > 0 && !strings.HasPrefix(msg, `msg="`) {
				msg = msg[:j]
			} else if j := strings.Index(msg[5:], `"`); j >= 0 {
				msg = msg[:j+6]
			}
		}
		msg = strings.TrimSpace(msg)
		if counts[msg] == 0 {
			order = append(order, msg)
		}
		counts[msg]++
	}
	var out []string
	for _, m := range order {
		out = append(out, fmt.Sprintf("worker %d: %d× %s", worker, counts[m], m))
	}
	return out
}

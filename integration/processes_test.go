package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/internal/demo"
	"github.com/throttler/throttler/internal/testenv"
)

// BenchmarkNoisyNeighbourProcesses is BenchmarkNoisyNeighbour as an outside
// check sees it: every part is a process of its own, as in production. The
// nats-server binary is built from the module this project tests against
// (github.com/nats-io/nats-server/v2), redis-server is the machine's, and two
// throttler binaries (cmd/throttler, default settings but for the scenario's
// limits and MaxAckPending) forward each admitted job to done.<tenant>. The
// benchmark publishes the jobs with their publish time in a header and
// measures publish → forward on a plain subscription to done.>, which also
// sees a job forwarded twice. Run it with
//
//	go test -run '^$' -bench NoisyNeighbourProcesses -benchtime 1x -timeout 30m ./integration/
func BenchmarkNoisyNeighbourProcesses(b *testing.B) {
	throttler, natsServer := buildThrottler(b), buildNATSServer(b)
	duration := 30 * time.Second
	if d, err := time.ParseDuration(benchDuration()); err == nil {
		duration = d
	}
	alone := map[int]time.Duration{} // B's p99 alone, by number of quiet tenants
	for _, v := range []noisyVariant{
		{name: "b-alone", quiet: 1},
		{name: "auto", aJobs: 20000, quiet: 1, defer_: "auto"},
		{name: "auto-lane-off", aJobs: 20000, quiet: 1, defer_: "auto", laneOff: true},
		{name: "nak", aJobs: 20000, quiet: 1, defer_: "nak"},
		{name: "flood-100k", aJobs: 100000, quiet: 1, defer_: "auto"},
		{name: "quiet-100-alone", quiet: 100},
		{name: "quiet-100", aJobs: 20000, quiet: 100, defer_: "auto"},
	} {
		if !benchVariant(v.name) {
			continue
		}
		b.Run(v.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				rep := runNoisyProcesses(b, natsServer, throttler, v, duration)
				if v.aJobs == 0 {
					alone[v.quiet] = rep.b.p99
				}
				b.Logf("\n%s", rep)
				b.ReportMetric(float64(rep.b.p99.Microseconds())/1000, "B-p99-ms")
				if a := alone[v.quiet]; a > 0 {
					b.ReportMetric(float64(rep.b.p99)/float64(a), "B-p99/alone")
				}
				if v.aJobs > 0 {
					if lost := rep.a.published - rep.a.admitted - rep.a.pendingAtEnd; lost != 0 {
						b.Errorf("A: %d published, %d admitted, %d still waiting: %d lost", rep.a.published, rep.a.admitted, rep.a.pendingAtEnd, lost)
					}
					b.ReportMetric(rep.a.rate, "A-jobs/s")
					b.ReportMetric(float64(rep.a.busiestSecond), "A-busiest-second")
					b.ReportMetric(rep.a.overQuota, "A-over-quota")
					b.ReportMetric(float64(rep.a.ranTwice), "A-ran-twice")
				}
				if rep.burstPassed > 0 {
					b.ReportMetric(float64(rep.burstPassed.Milliseconds()), "A-burst-passed-ms")
				}
				b.ReportMetric(float64(rep.maxAckPending)/10, "max-ack-pending-%")
				b.ReportMetric(rep.a.redisPerJob, "A-redis/job")
				b.ReportMetric(rep.b.redisPerJob, "B-redis/job")
				b.ReportMetric(rep.b.deliveries, "B-deliveries/job")
				b.ReportMetric(float64(rep.b.ranTwice), "B-ran-twice")
			}
		})
	}
}

// noisyVariant is one run of the noisy-neighbour scenario as processes:
// tenant A dumps aJobs at once (limit 100/s:10) while quiet tenants (b, or
// q000… when there are several) publish 10 jobs a second between them,
// each at a limit of 100/s:10.
type noisyVariant struct {
	name    string
	aJobs   int
	quiet   int
	defer_  string
	laneOff bool // THROTTLER_FAST_LANE=off
}

// benchVariant reports whether NOISY_VARIANTS (comma-separated names;
// empty: all) selects the variant name.
func benchVariant(name string) bool {
	sel := getenv("NOISY_VARIANTS")
	return sel == "" || slices.Contains(strings.Split(sel, ","), name)
}

// runNoisyProcesses runs one noisy-neighbour scenario (see noisyVariant;
// MaxAckPending 1,000; two workers) against processes for duration and
// reports it, the quiet tenants together as B. Deliveries per job are
// reported for B only: the workers' counters cannot tell which of A's
// deliveries belong to the jobs admitted in the run.
func runNoisyProcesses(tb testing.TB, natsServer, throttler string, v noisyVariant, duration time.Duration) noisyReport {
	aJobs := v.aJobs
	tb.Helper()
	natsURL := startNATSProcess(tb, natsServer)
	rs := testenv.StartRedis(tb)
	nc, err := nats.Connect(natsURL)
	must(tb, err, "connect")
	defer nc.Close()
	js, err := jetstream.New(nc)
	must(tb, err, "jetstream")

	// Every forward, with its receive time.
	type forward struct {
		id     string
		tenant string
		delay  time.Duration
		at     time.Time
	}
	// B publishes a job every 100 ms for duration.
	bJobs := int(duration / (100 * time.Millisecond))
	var (
		mu        sync.Mutex
		forwards  []forward
		bForwards int
		bAll      = make(chan struct{}) // closed once B's jobs were forwarded bJobs times
	)
	sub, err := nc.Subscribe("done.>", func(m *nats.Msg) {
		now := time.Now()
		sent, _ := strconv.ParseInt(m.Header.Get("Sent"), 10, 64)
		mu.Lock()
		tenant := strings.TrimPrefix(m.Subject, "done.")
		if tenant != "a" {
			tenant = "b" // the quiet tenants, together
		}
		f := forward{id: m.Header.Get("Job"), tenant: tenant, delay: now.Sub(time.Unix(0, sent)), at: now}
		forwards = append(forwards, f)
		if f.tenant == "b" {
			bForwards++
			if bForwards == bJobs {
				close(bAll)
			}
		}
		mu.Unlock()
	})
	must(tb, err, "subscribe done.>")
	must(tb, sub.SetPendingLimits(-1, -1), "pending limits")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	vars := map[string]string{
		"NATS_URL":                  natsURL,
		"REDIS_URL":                 rs.URL(),
		"THROTTLER_DEFAULT_LIMIT":   "100/s:10",
		"THROTTLER_MAX_ACK_PENDING": "1000",
		"THROTTLER_DEFER":           v.defer_,
		"THROTTLER_LOG_LEVEL":       "warn",
	}
	if v.defer_ == "" {
		vars["THROTTLER_DEFER"] = "auto"
	}
	if v.laneOff {
		vars["THROTTLER_FAST_LANE"] = "off"
	}
	quiet := make([]string, max(1, v.quiet))
	for i := range quiet {
		quiet[i] = "b"
		if len(quiet) > 1 {
			quiet[i] = fmt.Sprintf("q%03d", i)
		}
	}
	cfg, err := app.LoadSettingsFrom(vars)
	must(tb, err, "config")
	var metricsAddrs []string
	var workers []*exec.Cmd
	for i := 0; i < 2; i++ {
		addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(tb))
		metricsAddrs = append(metricsAddrs, addr)
		vars["THROTTLER_METRICS_ADDR"] = addr
		cmd, _, stderr := throttlerCmd(ctx, throttler, vars)
		must(tb, cmd.Start(), "start throttler")
		workers = append(workers, cmd)
		defer func() {
			if tb.Failed() {
				tb.Logf("worker %d stderr:\n%s", i, stderr.String())
			}
		}()
		testenv.Eventually(tb, 10*time.Second, "worker metrics", func() bool { _, err := scrape(addr); return err == nil })
	}
	stopWorkers := func() {
		for _, w := range workers {
			_ = w.Process.Signal(syscall.SIGTERM)
		}
		for _, w := range workers {
			_ = w.Wait()
		}
		workers = nil
	}
	defer stopWorkers()
	var cons jetstream.Consumer
	testenv.Eventually(tb, 10*time.Second, "the workers' consumer", func() bool {
		cons, err = js.Consumer(context.Background(), cfg.Stream, cfg.Consumer)
		return err == nil
	})

	publish := func(subject, id string) *nats.Msg {
		m := nats.NewMsg(subject)
		m.Header.Set("Sent", strconv.FormatInt(time.Now().UnixNano(), 10))
		m.Header.Set("Job", id)
		return m
	}
	sampler := startAckPendingSampler(cons)
	start := time.Now()
	var lastA uint64
	// A's flood, in chunks the client keeps in flight at once.
	const chunk = 2000
	for from := 0; from < aJobs; from += chunk {
		futures := make([]jetstream.PubAckFuture, 0, chunk)
		for i := from; i < min(aJobs, from+chunk); i++ {
			f, err := js.PublishMsgAsync(publish("jobs.a", "a"+strconv.Itoa(i)))
			must(tb, err, "publish a")
			futures = append(futures, f)
		}
		for _, f := range futures {
			select {
			case ack := <-f.Ok():
				lastA = max(lastA, ack.Sequence)
			case err := <-f.Err():
				tb.Fatalf("publish a: %v", err)
			case <-time.After(30 * time.Second):
				tb.Fatalf("publish a: no ack")
			}
		}
	}
	stored := time.Now()
	sampler.burstStored(lastA)
	tick := time.NewTicker(100 * time.Millisecond)
	for i := 0; i < bJobs; i++ {
		<-tick.C
		pctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := js.PublishMsg(pctx, publish("jobs."+quiet[i%len(quiet)], "b"+strconv.Itoa(i)))
		c()
		must(tb, err, "publish b")
	}
	tick.Stop()
	runFor := time.Since(start)
	// Let B's last jobs through, then stop. Not for more than 30 s: with
	// NAK-only deferral they may be stuck behind A's backlog for minutes,
	// and the report counts a job never forwarded as waiting the whole run.
	select {
	case <-bAll:
	case <-time.After(30 * time.Second):
	}
	maxPending, passedAt := sampler.stop()
	calls := map[string]float64{}
	for _, addr := range metricsAddrs {
		m, err := scrape(addr)
		must(tb, err, "metrics")
		for k, v := range m {
			calls[k] += v
		}
	}
	stopWorkers()

	rep := noisyReport{maxAckPending: maxPending, ackPendingLimit: 1000, runFor: runFor, scriptCalls: functionCalls(tb, rs.Client(tb))}
	if !passedAt.IsZero() {
		rep.burstPassed = passedAt.Sub(stored)
	}
	mu.Lock()
	defer mu.Unlock()
	seen := map[string]int{}
	byTenant := map[string][]forward{}
	for _, f := range forwards {
		seen[f.id]++
		if seen[f.id] == 1 {
			byTenant[f.tenant] = append(byTenant[f.tenant], f)
		}
	}
	for id, n := range seen {
		if n > 1 && strings.HasPrefix(id, "a") {
			rep.a.ranTwice++
		} else if n > 1 {
			rep.b.ranTwice++
		}
	}
	for t, tr := range map[string]*tenantReport{"a": &rep.a, "b": &rep.b} {
		fs := byTenant[t]
		d := make([]time.Duration, 0, len(fs))
		for _, f := range fs {
			d = append(d, f.delay)
			tr.admittedInTime = append(tr.admittedInTime, f.at)
		}
		tr.admitted = len(d)
		// A job of B never handled counts as waiting at least the whole run.
		for t == "b" && len(d) < bJobs {
			d = append(d, time.Since(start))
		}
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		if len(d) > 0 {
			tr.p50, tr.p99, tr.max = demo.Percentile(d, 0.50), demo.Percentile(d, 0.99), d[len(d)-1]
			for i := len(d) - 1; i >= 0 && i >= len(d)-5; i-- {
				tr.worst = append(tr.worst, d[i].Round(time.Millisecond))
			}
		}
		if t == "a" {
			tr.decisions = int64(calls[`throttler_redis_calls_total{tenant="a"}`])
			continue
		}
		for _, q := range quiet {
			tr.decisions += int64(calls[`throttler_redis_calls_total{tenant="`+q+`"}`])
		}
	}
	rep.a.published, rep.b.published = aJobs, bJobs
	if aJobs > 0 {
		rep.a.redisPerJob = float64(rep.a.decisions) / float64(aJobs)
		rep.a.moved = int64(calls[`throttler_moved_total{tenant="a"}`])
		// A's rate from when its forwards were stored, not received: this
		// process, busy publishing a flood, may read them late, and bunched.
		rep.a.admittedInTime = storedTimes(tb, js, cfg.Stream+"_FORWARD", "done.a")
		var ts, ks []float64
		for k, x := range rep.a.admittedInTime {
			if x.Sub(start) >= rateFrom && !x.After(start.Add(runFor)) {
				ts, ks = append(ts, x.Sub(start).Seconds()), append(ks, float64(k))
			}
		}
		rep.a.rate = slope(ts, ks)
		rep.a.busiestSecond = busiestSecond(rep.a.admittedInTime, start.Add(rateFrom))
		rep.a.overQuota = overQuota(rep.a.admittedInTime, start, 100, 10)
		// Still waiting in the stream: A's jobs, and B's never handled.
		rep.a.pendingAtEnd = pendingJobs(tb, js, cfg) - (bJobs - rep.b.admitted)
	}
	rep.b.redisPerJob = float64(rep.b.decisions) / float64(bJobs)
	var delivered float64
	for _, q := range quiet {
		delivered += calls[`throttler_delivered_total{tenant="`+q+`"}`]
	}
	rep.b.deliveries = delivered / float64(bJobs)
	return rep
}

// storedTimes returns when each message on subj was stored in stream,
// in order.
func storedTimes(tb testing.TB, js jetstream.JetStream, stream, subj string) []time.Time {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	must(tb, err, "stream %s", stream)
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subj))
	must(tb, err, "stream %s info", stream)
	want := int(info.State.Subjects[subj])
	oc, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}, HeadersOnly: true})
	must(tb, err, "ordered consumer")
	var at []time.Time
	for len(at) < want {
		batch, err := oc.Fetch(min(1000, want-len(at)), jetstream.FetchMaxWait(5*time.Second))
		must(tb, err, "fetch")
		got := 0
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			must(tb, err, "metadata")
			at = append(at, meta.Timestamp)
			got++
		}
		if got == 0 {
			tb.Fatalf("read %d of %d messages on %s", len(at), want, subj)
		}
	}
	return at
}

// buildNATSServer returns the path of the nats-server binary of the module
// this project tests against, built for this test run (testPrograms).
func buildNATSServer(tb testing.TB) string {
	tb.Helper()
	return testPrograms.path(tb, "nats-server")
}

// startNATSProcess starts the nats-server binary with JetStream on a free
// port and a store in a temporary directory, and returns its URL. It is
// stopped when the test ends.
func startNATSProcess(tb testing.TB, bin string) string {
	tb.Helper()
	port := testenv.FreePort(tb)
	cmd := exec.Command(bin, "-js", "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-sd", tb.TempDir())
	out := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	must(tb, cmd.Start(), "start nats-server")
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	testenv.Eventually(tb, 10*time.Second, "nats-server on "+addr, func() bool {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	})
	return "nats://" + addr
}

// metricLine is one sample of the Prometheus text format; client_golang
// writes large counts in exponent form (1.5e+06).
var metricLine = regexp.MustCompile(`^(\S+) (\S+)$`)

// scrape reads a worker's /metrics into name{labels} → value.
func scrape(addr string) (map[string]float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", addr, err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if m := metricLine.FindStringSubmatch(line); m != nil {
			if v, err := strconv.ParseFloat(m[2], 64); err == nil {
				out[m[1]] = v
			}
		}
	}
	return out, nil
}

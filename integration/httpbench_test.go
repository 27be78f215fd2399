package integration

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/httphandler"
	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/streams"
)

// BenchmarkHTTPHandlerRatio measures jobs/s sent by the worker with
// THROTTLER_HANDLER=http to a local server that answers 200 at once,
// against a plain Go client loop sending the same requests with the same
// concurrency, in rounds run back to back so both sides of each ratio see
// the same machine. Each round runs:
//
//   - plain: httpBenchConcurrency goroutines sending httpBenchJobs POSTs
//     (64-byte body, Content-Type, Throttler-Tenant, Throttler-Job-Id and
//     Idempotency-Key, as the handler sends them) through one keep-alive
//     client that keeps as many idle connections per host;
//   - worker: app.Run in process, as the binary runs it, with its handler
//     built from the settings (THROTTLER_HANDLER=http,
//     THROTTLER_CONCURRENCY=httpBenchConcurrency, a default limit of
//     1,000,000/s that no tenant reaches), over httpBenchJobs jobs
//     published before it starts;
//   - worker-no-http: the same worker with a handler that only counts the
//     job where the server would: the worker's pace without HTTP.
//
// Each side is timed at the server (the no-HTTP handler for the third),
// from the first request to arrive to the last; for the workers, also to
// the last ack. It reports the median, lowest and highest ratio worker /
// plain and the median ratio worker / worker-no-http; per side, the
// median jobs/s, CPU time per job and cores busy over the span (of this
// process, which holds nats-server, the HTTP server, the client and the
// worker, and of redis-server); and the most TCP connections the server
// accepted from a side in one round, and held open at once. Each round
// logs its own figures.
//
//	go test -run '^$' -bench HTTPHandlerRatio -benchtime 1x ./integration/
func BenchmarkHTTPHandlerRatio(b *testing.B) {
	h := newHTTPBench(b)
	var plain, worker, bare []httpBenchRun
	for range b.N {
		for round := range httpBenchRounds {
			p := h.runPlain(b)
			w := h.runWorker(b, nil)
			n := h.runWorker(b, h.sink.handle)
			b.Logf("round %d: plain %s; worker %s, %.0f to the last ack; worker-no-http %.0f jobs/s, %.1f µs CPU/job; worker/plain %.3f",
				round+1, p, w, w.ackedRate(), n.rate(), n.cpuPerJob(), w.rate()/p.rate())
			plain, worker, bare = append(plain, p), append(worker, w), append(bare, n)
		}
	}
	ratios := make([]float64, len(plain))
	vsBare := make([]float64, len(worker))
	for i := range plain {
		ratios[i] = worker[i].rate() / plain[i].rate()
		vsBare[i] = worker[i].rate() / bare[i].rate()
	}
	testenv.ReportRatios(b, ratios)
	b.ReportMetric(testenv.Median(vsBare), "worker/no-http")
	for _, side := range []struct {
		name string
		runs []httpBenchRun
	}{{"plain", plain}, {"worker", worker}, {"worker-no-http", bare}} {
		b.ReportMetric(medianOf(side.runs, httpBenchRun.rate), side.name+"-jobs/s")
		b.ReportMetric(medianOf(side.runs, httpBenchRun.cpuPerJob), side.name+"-cpu-µs/job")
		b.ReportMetric(medianOf(side.runs, httpBenchRun.cores), side.name+"-cores")
	}
	for _, side := range []struct {
		name string
		runs []httpBenchRun
	}{{"plain", plain}, {"worker", worker}} {
		b.ReportMetric(maxOf(side.runs, func(r httpBenchRun) float64 { return float64(r.conns) }), side.name+"-max-conns")
		b.ReportMetric(maxOf(side.runs, func(r httpBenchRun) float64 { return float64(r.peak) }), side.name+"-max-open")
	}
}

const (
	// httpBenchRounds is how many rounds BenchmarkHTTPHandlerRatio runs.
	httpBenchRounds = 7
	// httpBenchJobs is how many jobs each side sends per round.
	httpBenchJobs = 20_000
	// httpBenchConcurrency is the concurrency of both sides: the worker's
	// default THROTTLER_CONCURRENCY.
	httpBenchConcurrency = 16
	// httpBenchTenants is how many tenants the jobs are spread over.
	httpBenchTenants = 100
	// httpBenchPayload is each job's body size.
	httpBenchPayload = 64
	// httpBenchSettle bounds how long one side of a round may take.
	httpBenchSettle = 2 * time.Minute
	// httpBenchContentType is the Content-Type of every job and request.
	httpBenchContentType = "application/octet-stream"
)

// httpBench is what every round shares: the servers, the settings and the
// publishing connection.
type httpBench struct {
	nats *testenv.NATS
	rdb  *redis.Client         // reads redis-server's CPU time
	wrdb redis.UniversalClient // the worker's, as the binary makes it
	js   jetstream.JetStream   // publishes the jobs, reads the consumer
	cfg  *app.Settings
	sink *httpSink
	url  string // the server's URL up to the tenant: the plain loop's THROTTLER_HTTP_URL
	log  *slog.Logger
}

// newHTTPBench starts nats-server, redis-server and the no-op HTTP server,
// and creates the jobs stream.
func newHTTPBench(b *testing.B) *httpBench {
	b.Helper()
	ns := testenv.StartNATS(b, "")
	rs := testenv.StartRedis(b)
	sink := &httpSink{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sink.arrive(r.Header.Get(header.Tenant), r.Header.Get(httphandler.HeaderIdempotencyKey))
		w.WriteHeader(http.StatusOK)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			sink.opened()
		case http.StateClosed, http.StateHijacked:
			sink.open.Add(-1)
		}
	}
	srv.Start()
	b.Cleanup(srv.Close)

	js, err := jetstream.New(ns.Connect(b), jetstream.WithPublishAsyncMaxPending(4096))
	must(b, err, "jetstream")
	cfg, err := app.LoadSettingsFrom(map[string]string{
		"NATS_URL":                   ns.URL(),
		"REDIS_URL":                  rs.URL(),
		"THROTTLER_DEFAULT_LIMIT":    "1000000/s",
		"THROTTLER_CONCURRENCY":      strconv.Itoa(httpBenchConcurrency),
		"THROTTLER_HANDLER":          "http",
		"THROTTLER_HTTP_URL":         srv.URL + "/jobs/{tenant}",
		"THROTTLER_SHUTDOWN_TIMEOUT": "5s",
		"THROTTLER_LOG_LEVEL":        "error",
	})
	must(b, err, "config")
	wrdb, err := app.NewRedis(cfg.Config, 1)
	must(b, err, "redis client")
	b.Cleanup(func() { _ = wrdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = streams.EnsureStream(ctx, js, streams.StreamSpec{Name: cfg.Stream, Subjects: cfg.Subjects})
	must(b, err, "stream")
	return &httpBench{
		nats: ns, rdb: rs.Client(b), wrdb: wrdb, js: js, cfg: cfg, sink: sink,
		url: srv.URL + "/jobs/", log: slog.New(slog.NewTextHandler(logSink(), &slog.HandlerOptions{Level: slog.LevelError})),
	}
}

// httpBenchRun is what one side of a round measured.
type httpBenchRun struct {
	span  time.Duration // first arrival to last
	acked time.Duration // first arrival to the last ack (workers only)
	cpu   time.Duration // CPU time of this process and redis-server over span
	conns int64         // TCP connections the server accepted
	peak  int64         // the most open at once
}

// rate is jobs/s from the first arrival to the last.
func (r httpBenchRun) rate() float64 { return httpBenchJobs / r.span.Seconds() }

// ackedRate is jobs/s from the first arrival to the last ack.
func (r httpBenchRun) ackedRate() float64 { return httpBenchJobs / r.acked.Seconds() }

// cores is how many cores were busy on average over span.
func (r httpBenchRun) cores() float64 { return r.cpu.Seconds() / r.span.Seconds() }

// cpuPerJob is the CPU time of this process and redis-server per job, in µs.
func (r httpBenchRun) cpuPerJob() float64 { return float64(r.cpu.Microseconds()) / httpBenchJobs }

// String is the run as a round's log shows it.
func (r httpBenchRun) String() string {
	return fmt.Sprintf("%.0f jobs/s, %.1f µs CPU/job (%.2f cores), %d connections (%d open at most)",
		r.rate(), r.cpuPerJob(), r.cores(), r.conns, r.peak)
}

// maxOf is the highest of f over runs.
func maxOf(runs []httpBenchRun, f func(httpBenchRun) float64) float64 {
	m := 0.0
	for _, r := range runs {
		m = max(m, f(r))
	}
	return m
}

// medianOf is the median of f over runs.
func medianOf(runs []httpBenchRun, f func(httpBenchRun) float64) float64 {
	xs := make([]float64, len(runs))
	for i, r := range runs {
		xs[i] = f(r)
	}
	return testenv.Median(xs)
}

// runPlain sends httpBenchJobs requests from httpBenchConcurrency
// goroutines through one keep-alive client, as a program calling the
// endpoint itself would, and returns what the server saw.
func (h *httpBench) runPlain(b *testing.B) httpBenchRun {
	b.Helper()
	transport := http.DefaultTransport.(*http.Transport).Clone()
	// The default keeps 2 idle connections per host; the handler keeps as
	// many as its concurrency, and so does this loop.
	transport.MaxIdleConnsPerHost = httpBenchConcurrency
	client := &http.Client{Transport: transport}
	defer client.CloseIdleConnections()
	payload := make([]byte, httpBenchPayload)
	ctx, cancel := context.WithTimeout(context.Background(), httpBenchSettle)
	defer cancel()

	meter := h.start(b)
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		firstErr error
		errOnce  sync.Once
	)
	for range httpBenchConcurrency {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < httpBenchJobs; i = next.Add(1) - 1 {
				if err := sendPlain(ctx, client, h.url, i, payload); err != nil {
					errOnce.Do(func() { firstErr = err })
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		b.Fatalf("plain client: %v", firstErr)
	}
	return meter.wait(b)
}

// sendPlain sends request i of the plain loop and reads its answer.
func sendPlain(ctx context.Context, client *http.Client, base string, i int64, payload []byte) error {
	tenant := "t" + strconv.FormatInt(i%httpBenchTenants, 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+tenant, bytes.NewReader(payload))
	if err != nil {
		return err
	}
	id := "PLAIN:" + strconv.FormatInt(i+1, 10)
	req.Header.Set("Content-Type", httpBenchContentType)
	req.Header.Set(header.Tenant, tenant)
	req.Header.Set(header.JobID, id)
	req.Header.Set(httphandler.HeaderIdempotencyKey, id)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("request %d: HTTP %d", i, resp.StatusCode)
	}
	return nil
}

// runWorker publishes httpBenchJobs jobs (untimed), then runs the worker
// in process until every job has arrived and is acked, and returns what
// was measured. A nil handler is the one the settings name (HTTP to the
// server); another replaces it.
func (h *httpBench) runWorker(b *testing.B, handler consumer.Handler) httpBenchRun {
	b.Helper()
	h.publish(b)
	nc := h.nats.Connect(b)
	defer nc.Close()
	cons, err := h.js.Consumer(context.Background(), h.cfg.Stream, h.cfg.Consumer)
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		b.Fatalf("consumer: %v", err)
	}
	var (
		mu sync.Mutex
		w  *consumer.Worker
	)
	meter := h.start(b)
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() {
		ran <- app.Run(ctx, h.cfg, app.Options{NATS: nc, Redis: h.wrdb, Handler: handler, Logger: h.log,
			OnWorker: func(cw *consumer.Worker) { mu.Lock(); w = cw; mu.Unlock() }})
	}()
	select {
	case <-meter.c.all:
	case err := <-ran:
		b.Fatalf("worker stopped after %d jobs: %v", meter.c.n.Load(), err)
	case <-time.After(httpBenchSettle):
		b.Fatalf("%d of %d jobs arrived in %s", meter.c.n.Load(), httpBenchJobs, httpBenchSettle)
	}
	if cons == nil { // the first round: the worker created it
		cons, err = h.js.Consumer(context.Background(), h.cfg.Stream, h.cfg.Consumer)
		must(b, err, "consumer")
	}
	rs := meter.wait(b)
	testenv.WaitAcked(b, cons, httpBenchSettle)
	rs.acked = time.Since(time.Unix(0, meter.c.start.Load()))

	stop()
	if err := <-ran; err != nil {
		b.Fatalf("worker: %v", err)
	}
	var admitted, other int64
	mu.Lock()
	for _, s := range w.Stats() {
		admitted += s.Admitted
		other += s.Deferred + s.Failed + s.RedisErrors + s.DeadLettered + s.DownstreamHolds
	}
	mu.Unlock()
	if admitted != httpBenchJobs || other != 0 {
		b.Fatalf("worker admitted %d jobs and deferred, failed or held %d, want %d and 0", admitted, other, httpBenchJobs)
	}
	if n := meter.c.n.Load(); n != httpBenchJobs {
		b.Fatalf("%d requests arrived for %d jobs", n, httpBenchJobs)
	}
	return rs
}

// publish publishes httpBenchJobs jobs over httpBenchTenants tenants, each
// with a Content-Type header the handler passes on, and waits for their
// acks.
func (h *httpBench) publish(b *testing.B) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), httpBenchSettle)
	defer cancel()
	payload := make([]byte, httpBenchPayload)
	acks := make([]jetstream.PubAckFuture, 0, httpBenchJobs)
	for i := range httpBenchJobs {
		msg := &nats.Msg{
			Subject: "jobs.t" + strconv.Itoa(i%httpBenchTenants),
			Header:  nats.Header{"Content-Type": []string{httpBenchContentType}},
			Data:    payload,
		}
		ack, err := h.js.PublishMsgAsync(msg, jetstream.WithStallWait(time.Minute))
		must(b, err, "publish job %d", i)
		acks = append(acks, ack)
	}
	select {
	case <-h.js.PublishAsyncComplete():
	case <-ctx.Done():
		b.Fatalf("publishing %d jobs: %v", httpBenchJobs, ctx.Err())
	}
	for i, ack := range acks {
		select {
		case err := <-ack.Err():
			b.Fatalf("publish job %d: %v", i, err)
		default:
		}
	}
}

// httpMeter times one side of a round: it reads the CPU clocks when the
// first job arrives and when the last has.
type httpMeter struct {
	h     *httpBench
	c     *httpCount
	begun chan cpuReading // CPU time at the first arrival
}

// cpuReading is a reading of httpBench.cpu.
type cpuReading struct {
	d   time.Duration
	err error
}

// start resets the sink for a side of httpBenchJobs jobs and starts
// watching for its first arrival.
func (h *httpBench) start(b *testing.B) *httpMeter {
	b.Helper()
	// The previous side's connections close as it ends; the server may
	// see them close a little later.
	testenv.Eventually(b, 10*time.Second, "no connection open on the server", func() bool { return h.sink.open.Load() == 0 })
	m := &httpMeter{h: h, c: h.sink.reset(httpBenchJobs), begun: make(chan cpuReading, 1)}
	go func() {
		select {
		case <-m.c.first:
			d, err := h.cpu()
			m.begun <- cpuReading{d, err}
		case <-time.After(httpBenchSettle):
			m.begun <- cpuReading{err: errors.New("no job arrived")}
		}
	}()
	return m
}

// wait waits until every job has arrived and returns the span, the CPU
// time over it and the connections the server accepted.
func (m *httpMeter) wait(b *testing.B) httpBenchRun {
	b.Helper()
	select {
	case <-m.c.all:
	case <-time.After(httpBenchSettle):
		b.Fatalf("%d of %d jobs arrived in %s", m.c.n.Load(), httpBenchJobs, httpBenchSettle)
	}
	begun := <-m.begun
	end, err := m.h.cpu()
	if err = cmp.Or(begun.err, err); err != nil {
		b.Fatal(err)
	}
	if bad := m.c.bad.Load(); bad > 0 {
		b.Fatalf("%d requests without a tenant or an idempotency key", bad)
	}
	return httpBenchRun{span: time.Duration(m.c.last.Load() - m.c.start.Load()), cpu: end - begun.d, conns: m.c.conns.Load(), peak: m.c.peak.Load()}
}

// cpu is the CPU time used so far by this process and by redis-server.
func (h *httpBench) cpu() (time.Duration, error) {
	proc, err := testenv.ProcessCPU()
	if err != nil {
		return 0, err
	}
	redis, err := testenv.RedisCPU(context.Background(), h.rdb)
	return proc + redis, err
}

// httpSink counts the jobs arriving at the server, or at the worker's
// handler when it sends none. Each side of a round counts into a fresh
// httpCount; the server's goroutines read it atomically.
type httpSink struct {
	cur  atomic.Pointer[httpCount]
	open atomic.Int64 // TCP connections open on the server
}

// httpCount is what one side of a round saw arrive.
type httpCount struct {
	want        int64
	n           atomic.Int64 // arrivals
	bad         atomic.Int64 // arrivals without a tenant or a job id
	conns       atomic.Int64 // TCP connections the server accepted
	peak        atomic.Int64 // the most open at once
	start, last atomic.Int64 // UnixNano of the first and the want-th arrival
	first       chan struct{}
	all         chan struct{}
}

// reset starts counting a side of want jobs and returns its count.
func (s *httpSink) reset(want int64) *httpCount {
	c := &httpCount{want: want, first: make(chan struct{}), all: make(chan struct{})}
	s.cur.Store(c)
	return c
}

// opened counts a TCP connection the server accepted.
func (s *httpSink) opened() {
	open := s.open.Add(1)
	c := s.cur.Load()
	if c == nil {
		return
	}
	c.conns.Add(1)
	for peak := c.peak.Load(); open > peak && !c.peak.CompareAndSwap(peak, open); peak = c.peak.Load() {
	}
}

// arrive counts a job of tenant with id.
func (s *httpSink) arrive(tenant, id string) {
	c := s.cur.Load()
	n := c.n.Add(1)
	now := time.Now().UnixNano()
	if tenant == "" || id == "" {
		c.bad.Add(1)
	}
	if n == 1 {
		c.start.Store(now)
		close(c.first)
	}
	if n == c.want {
		c.last.Store(now)
		close(c.all)
	}
}

// handle is the worker's handler without HTTP: it counts the job where
// the server would.
func (s *httpSink) handle(_ context.Context, job consumer.Job) error {
	s.arrive(job.Tenant, job.ID)
	return nil
}

package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/internal/ops"
	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/streams"
	"github.com/throttler/throttler/subject"
)

// testPrograms are the binaries tests run as processes (buildThrottler,
// buildNATSServer), whose build TestMain starts before the first test.
var testPrograms *programs

func TestMain(m *testing.M) {
	progs, err := startPrograms()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testPrograms = progs
	goleak.VerifyTestMain(m,
		goleak.Cleanup(func(code int) {
			progs.stop()
			os.Exit(code)
		}),
		// go-redis keeps a pool reaper per client until Close; nats-server
		// leaves a few global goroutines behind after shutdown.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine.func1"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*Server).logRejectedTLSConns"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		// A server shut down while it was creating a stream can leave that
		// stream's store unstopped: its state flusher runs on, and with it
		// the global access-time ticker its store registered.
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"),
	)
}

// env is one test's servers and connections.
type env struct {
	t       testing.TB
	nats    *testenv.NATS // nil when the test runs a legacy nats-server
	natsURL string
	redis   *testenv.Redis
	nc      *nats.Conn
	js      jetstream.JetStream
}

// maxAsyncPublishes is how many asynchronous publishes a test's JetStream
// context may have awaiting their acks. Tests publish bursts of up to
// 10,000 jobs at once; with nats.go's default of 4,000, a publish waits
// for acks to catch up and fails after 200 ms, which two busy cores under
// the race detector can take.
const maxAsyncPublishes = 16384

// setup starts a NATS JetStream server and a redis-server for one test.
func setup(t testing.TB) *env {
	t.Helper()
	n := testenv.StartNATS(t, "")
	r := testenv.StartRedis(t)
	nc := n.Connect(t)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(maxAsyncPublishes))
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return &env{t: t, nats: n, natsURL: n.URL(), redis: r, nc: nc, js: js}
}

// setupLegacy starts the distribution's nats-server program (2.9.10 on
// Debian, without message schedules) and a redis-server for one test.
func setupLegacy(t *testing.T) *env {
	t.Helper()
	n := testenv.StartLegacyNATS(t)
	r := testenv.StartRedis(t)
	e := &env{t: t, natsURL: n.URL(), redis: r}
	e.nc = e.connect()
	js, err := jetstream.New(e.nc, jetstream.WithPublishAsyncMaxPending(maxAsyncPublishes))
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	e.js = js
	return e
}

// connect opens a client connection to the test's NATS server that
// reconnects forever and is closed when the test ends.
func (e *env) connect() *nats.Conn {
	e.t.Helper()
	if e.nats != nil {
		return e.nats.Connect(e.t)
	}
	nc, err := nats.Connect(e.natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		e.t.Fatalf("connect %s: %v", e.natsURL, err)
	}
	e.t.Cleanup(nc.Close)
	return nc
}

// config builds a validated configuration from the defaults, the test
// servers and vars.
func (e *env) config(vars map[string]string) *app.Settings {
	e.t.Helper()
	all := map[string]string{
		"NATS_URL":                   e.natsURL,
		"REDIS_URL":                  e.redis.URL(),
		"THROTTLER_SHUTDOWN_TIMEOUT": "5s",
		"THROTTLER_LOG_LEVEL":        "warn",
	}
	for k, v := range vars {
		all[k] = v
	}
	cfg, err := app.LoadSettingsFrom(withTestMetrics(all))
	if err != nil {
		e.t.Fatalf("config: %v", err)
	}
	return cfg
}

// worker is one running worker.
type worker struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when the worker has returned
	err    error         // what it returned; read after done
	mu     sync.Mutex
	w      *consumer.Worker
}

// stop cancels the worker and waits for its clean shutdown. It may be
// called more than once.
func (w *worker) stop(t testing.TB) {
	t.Helper()
	w.cancel()
	select {
	case <-w.done:
		if w.err != nil {
			t.Errorf("worker: %v", w.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("worker did not stop within 30s")
	}
}

// stats returns the worker's counters.
func (w *worker) stats() map[string]consumer.TenantStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.w == nil {
		return nil
	}
	return w.w.Stats()
}

// built reports whether the worker is built: app.Run has set up the
// streams and consumers and is about to run it.
func (w *worker) built() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w != nil
}

// waitCompleted waits until w counts n of tenant's jobs completed. It
// counts a job just after sending its ack, so a job can be forwarded, and
// even acked, before it is counted.
func (w *worker) waitCompleted(t *testing.T, tenant string, n int64) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("%d jobs of %s counted completed", n, tenant), func() bool {
		return w.stats()[tenant].Completed >= n
	})
}

// held returns how many pulled messages the worker has not acted on.
func (w *worker) held() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.w == nil {
		return 0
	}
	return w.w.Pulled()
}

// redisClient returns the client the binary makes for cfg (app.NewRedis):
// of e's Redis, unless cfg names another; it is closed when the test ends.
func (e *env) redisClient(cfg *app.Settings) redis.UniversalClient {
	e.t.Helper()
	c, err := app.NewRedis(cfg.Config, 1)
	if err != nil {
		e.t.Fatalf("redis client: %v", err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

// startWorker runs a worker with cfg and its own NATS and Redis connections
// until the test ends or stop is called. handler may be nil (forward).
func (e *env) startWorker(cfg *app.Settings, handler consumer.Handler) *worker {
	e.t.Helper()
	return e.startWorkerWith(cfg, handler, slog.New(slog.NewTextHandler(logSink(), &slog.HandlerOptions{Level: slog.LevelWarn})))
}

// startWorkerWith is startWorker logging to log.
func (e *env) startWorkerWith(cfg *app.Settings, handler consumer.Handler, log *slog.Logger) *worker {
	e.t.Helper()
	nc := e.connect()
	rdb := e.redisClient(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	w := &worker{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.err = app.Run(ctx, cfg, app.Options{NATS: nc, Redis: rdb, Handler: handler, Logger: log,
			OnWorker: func(cw *consumer.Worker) { w.mu.Lock(); w.w = cw; w.mu.Unlock() }})
	}()
	e.t.Cleanup(func() {
		cancel()
		select {
		case <-w.done:
		case <-time.After(30 * time.Second):
			e.t.Errorf("worker did not stop within 30s")
		}
	})
	return w
}

// logSink is where worker logs go: stderr with -v, else nowhere.
func logSink() io.Writer {
	if testing.Verbose() {
		return os.Stderr
	}
	return io.Discard
}

// publish publishes one job and returns its stream sequence.
func (e *env) publish(subject string, hdr nats.Header, data []byte) uint64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := e.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Header: hdr, Data: data})
	if err != nil {
		e.t.Fatalf("publish %s: %v", subject, err)
	}
	return ack.Sequence
}

// publishJobs publishes n jobs on subject, with headers hdr, and returns
// their ids (those of stream).
func (e *env) publishJobs(stream, subject string, hdr nats.Header, n int) map[string]bool {
	e.t.Helper()
	ids := make(map[string]bool, n)
	for range n {
		ids[jobID(stream, e.publish(subject, hdr, []byte("x")))] = true
	}
	return ids
}

// expectStop starts a worker configured with vars and expects it to stop
// at once with app.ErrUnsupported, naming what (a variable).
func (e *env) expectStop(vars map[string]string, what string) {
	e.t.Helper()
	w := e.startWorker(e.config(vars), consumer.Forwarder(e.js, "done.{tenant}"))
	select {
	case <-w.done:
		if !errors.Is(w.err, app.ErrUnsupported) || !strings.Contains(w.err.Error(), what) {
			e.t.Errorf("%v: %v, want ErrUnsupported naming %s", vars, w.err, what)
		}
	case <-time.After(10 * time.Second):
		e.t.Errorf("%v: still running, want a stop naming %s", vars, what)
	}
}

// createJobsStream creates the jobs stream as an operator would, before
// any worker starts.
func (e *env) createJobsStream(sc jetstream.StreamConfig) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.js.CreateStream(ctx, sc); err != nil {
		e.t.Fatalf("create stream %s: %v", sc.Name, err)
	}
}

// ensureStream creates the jobs stream before publishing.
func (e *env) ensureStream(cfg *app.Settings) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := streams.EnsureStream(ctx, e.js, streams.StreamSpec{Name: cfg.Stream, Subjects: cfg.Subjects}); err != nil {
		e.t.Fatalf("stream: %v", err)
	}
}

// collected is one message read from an output subject.
type collected struct {
	subject string
	jobID   string
	reason  string
	tenant  string
	seq     uint64
	header  nats.Header
	at      time.Time
}

// collector reads every message stored on an output subject pattern.
type collector struct {
	e       *env
	stream  string // the stream that captures pattern
	pattern string
	mu      sync.Mutex
	msgs    []collected
}

// collect starts an ordered consumer on the stream capturing pattern.
func (e *env) collect(pattern string) *collector {
	e.t.Helper()
	c := &collector{e: e, pattern: pattern}
	// The worker creates the output streams as it sets up.
	testenv.Eventually(e.t, 10*time.Second, "a stream capturing "+pattern, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		name, err := e.js.StreamNameBySubject(ctx, pattern)
		c.stream = name
		return err == nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	oc, err := e.js.OrderedConsumer(ctx, c.stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{pattern}})
	if err != nil {
		e.t.Fatalf("ordered consumer: %v", err)
	}
	cc, err := oc.Consume(func(m jetstream.Msg) {
		meta, _ := m.Metadata()
		var seq uint64
		if meta != nil {
			seq = meta.Sequence.Stream
		}
		c.mu.Lock()
		c.msgs = append(c.msgs, collected{subject: m.Subject(), jobID: m.Headers().Get(header.JobID),
			reason: m.Headers().Get(header.Reason), tenant: m.Headers().Get(header.Tenant),
			seq: seq, header: m.Headers(), at: time.Now()})
		c.mu.Unlock()
	})
	if err != nil {
		e.t.Fatalf("consume: %v", err)
	}
	e.t.Cleanup(cc.Stop)
	return c
}

// all returns what has been collected so far.
func (c *collector) all() []collected {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]collected(nil), c.msgs...)
}

// waitCount waits until at least n messages were collected and returns
// them.
func (c *collector) waitCount(t *testing.T, n int, timeout time.Duration) []collected {
	t.Helper()
	var got []collected
	defer func() {
		if len(got) < n { // Eventually failed the test
			t.Logf("collected %d of %d messages on %s", len(got), n, c.pattern)
		}
	}()
	testenv.Eventually(t, timeout, fmt.Sprintf("%d messages on %s", n, c.pattern), func() bool {
		got = c.all()
		return len(got) >= n
	})
	return got
}

// waitAll waits until c has read every message its stream holds on its
// pattern, and returns them. Once what publishes there has settled (see
// waitSettled), that is every message there will be.
func (c *collector) waitAll(t *testing.T, timeout time.Duration) []collected {
	t.Helper()
	return c.waitCount(t, c.e.subjectCount(c.stream, c.pattern), timeout)
}

// subjectCount is how many messages of stream match filter.
func (e *env) subjectCount(stream, filter string) int {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := e.js.Stream(ctx, stream)
	must(e.t, err, "stream %s", stream)
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
	must(e.t, err, "stream info")
	n := 0
	for _, c := range info.State.Subjects {
		n += int(c)
	}
	return n
}

// waitStream waits until the worker has created the jobs stream.
func (e *env) waitStream(name string) {
	e.t.Helper()
	testenv.Eventually(e.t, 10*time.Second, "the worker to create stream "+name, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := e.js.Stream(ctx, name)
		return err == nil
	})
}

// waitBuilt waits until w has set up the streams and consumers and built
// its worker.
func (e *env) waitBuilt(w *worker) {
	e.t.Helper()
	testenv.Eventually(e.t, 10*time.Second, "the worker's set-up", w.built)
}

// consumerInfo reads the consumer's state from the server.
func (e *env) consumerInfo(stream, name string) *jetstream.ConsumerInfo {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := e.js.Consumer(ctx, stream, name)
	must(e.t, err, "consumer %s", name)
	info, err := c.Info(ctx)
	must(e.t, err, "consumer info")
	return info
}

// idleConsumers reads the named consumers of stream, skipping those that
// do not exist, and returns how many deliveries each has made; or, as busy,
// what one still has pending or awaiting an ack, or why it could not be
// read.
func (e *env) idleConsumers(stream string, names []string) (delivered []uint64, busy string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, name := range names {
		c, err := e.js.Consumer(ctx, stream, name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			delivered = append(delivered, 0)
			continue
		}
		if err != nil {
			return nil, fmt.Sprintf("consumer %s: %v", name, err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			return nil, fmt.Sprintf("consumer %s info: %v", name, err)
		}
		if info.NumPending != 0 || info.NumAckPending != 0 {
			return nil, fmt.Sprintf("consumer %s: %d pending, %d awaiting an ack", name, info.NumPending, info.NumAckPending)
		}
		delivered = append(delivered, info.Delivered.Consumer)
	}
	return delivered, ""
}

// waitIdle waits until the named consumers of stream have nothing pending
// and nothing awaiting an ack (see idleConsumers).
func (e *env) waitIdle(t testing.TB, timeout time.Duration, stream string, consumers ...string) {
	t.Helper()
	busy := "not read yet"
	defer func() {
		if busy != "" { // Eventually failed the test
			t.Logf("still going on: %s", busy)
		}
	}()
	testenv.Eventually(t, timeout, fmt.Sprintf("consumers %v to be idle", consumers), func() bool {
		_, busy = e.idleConsumers(stream, consumers)
		return busy == ""
	})
}

// settled says what is still going on with the jobs of stream, or "" when
// nothing is: the named consumers have nothing pending and nothing
// awaiting an ack, and no moved job waits in a schedule under schedules.
// It reads the consumers, then the schedules, then the consumers again,
// which must have delivered nothing in between: a job moved, or a schedule
// fired, while it read shows in the second reading. Once settled, nothing
// more is delivered until something is published.
func (e *env) settled(stream string, schedules subject.Schedules, consumers ...string) (busy string) {
	before, busy := e.idleConsumers(stream, consumers)
	if busy != "" {
		return busy
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	waiting, err := ops.WaitingInSchedules(ctx, e.js, stream, schedules)
	if err != nil {
		return err.Error()
	}
	if waiting > 0 {
		return fmt.Sprintf("%d moved jobs wait in schedules", waiting)
	}
	after, busy := e.idleConsumers(stream, consumers)
	if busy != "" {
		return busy
	}
	if !slices.Equal(before, after) {
		return fmt.Sprintf("the consumers delivered more while read (%v, then %v)", before, after)
	}
	return ""
}

// waitSettled waits until the workers of cfg have nothing left to do (see
// settled): their consumers of jobs, bundles and fast-lane copies are idle
// and no moved job waits in a schedule. What a test counts after that is
// final, but for messages on their way to its own readers (see
// collector.waitAll).
func (e *env) waitSettled(t testing.TB, cfg *app.Settings, timeout time.Duration) {
	t.Helper()
	busy := "not read yet"
	defer func() {
		if busy != "" { // Eventually failed the test
			t.Logf("still going on: %s", busy)
		}
	}()
	testenv.Eventually(t, timeout, "the jobs of "+cfg.Stream+" to settle", func() bool {
		busy = e.settled(cfg.Stream, cfg.Schedules, cfg.Consumer, cfg.Consumer+"_bundles", cfg.Consumer+"_fast", cfg.Consumer+"_woken")
		return busy == ""
	})
}

// jobID is the id the worker gives the job at seq in stream.
func jobID(stream string, seq uint64) string { return stream + ":" + strconv.FormatUint(seq, 10) }

// must fails the test on err.
func must(t testing.TB, err error, what string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(what, args...), err)
	}
}

// getenv reads an optional tuning variable of a benchmark.
func getenv(name string) string { return os.Getenv(name) }

// countsOnly marks a test whose assertions are counts (nothing lost,
// nothing run twice) under generous deadlines, not rates or latencies: it
// runs in parallel with the other such tests, after the rest of the
// package, so that these long tests overlap (at most GOMAXPROCS at once,
// go test's -parallel default) and no test that measures a rate shares
// the cores with one.
func countsOnly(t *testing.T) {
	t.Helper()
	t.Parallel()
}

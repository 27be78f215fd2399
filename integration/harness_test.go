package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
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
	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-redis keeps a pool reaper per client until Close; nats-server
		// leaves a few global goroutines behind after shutdown.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine.func1"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*Server).logRejectedTLSConns"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// env is one test's servers and connections.
type env struct {
	t       *testing.T
	nats    *testenv.NATS // nil when the test runs a legacy nats-server
	natsURL string
	redis   *testenv.Redis
	nc      *nats.Conn
	js      jetstream.JetStream
}

// setup starts a NATS JetStream server and a redis-server for one test.
func setup(t *testing.T) *env {
	t.Helper()
	n := testenv.StartNATS(t, "")
	r := testenv.StartRedis(t)
	nc := n.Connect(t)
	js, err := jetstream.New(nc)
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
	js, err := jetstream.New(e.nc)
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
	cfg, err := app.LoadSettingsFrom(all)
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
func (w *worker) stop(t *testing.T) {
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

// held returns how many pulled messages the worker has not acted on.
func (w *worker) held() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.w == nil {
		return 0
	}
	return w.w.Held()
}

// redisClient returns a client of e's Redis with the options the binary
// uses for cfg; it is closed when the test ends.
func (e *env) redisClient(cfg *app.Settings) *redis.Client {
	e.t.Helper()
	opts, err := app.RedisOptions(cfg.Config, 1)
	if err != nil {
		e.t.Fatalf("redis options: %v", err)
	}
	c := redis.NewClient(opts)
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

// startWorker runs a worker with cfg and its own NATS and Redis connections
// until the test ends or stop is called. handler may be nil (forward).
func (e *env) startWorker(cfg *app.Settings, handler consumer.Handler) *worker {
	e.t.Helper()
	nc := e.connect()
	rdb := e.redisClient(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	w := &worker{cancel: cancel, done: make(chan struct{})}
	log := slog.New(slog.NewTextHandler(logSink(), &slog.HandlerOptions{Level: slog.LevelWarn}))
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
	if _, err := consumer.EnsureStream(ctx, e.js, consumer.StreamSpec{Name: cfg.Stream, Subjects: cfg.Subjects}); err != nil {
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
	mu   sync.Mutex
	msgs []collected
}

// collect starts an ordered consumer on the stream capturing pattern.
func (e *env) collect(pattern string) *collector {
	e.t.Helper()
	c := &collector{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var stream string
	deadline := time.Now().Add(10 * time.Second)
	for {
		name, err := e.js.StreamNameBySubject(ctx, pattern)
		if err == nil {
			stream = name
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("no stream captures %s: %v", pattern, err)
		}
		time.Sleep(20 * time.Millisecond) // polling for the worker's set-up
	}
	oc, err := e.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{pattern}})
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
		c.msgs = append(c.msgs, collected{subject: m.Subject(), jobID: m.Headers().Get(consumer.HeaderJobID),
			reason: m.Headers().Get(consumer.HeaderReason), tenant: m.Headers().Get(consumer.HeaderTenant),
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

// waitCount waits until at least n messages were collected.
func (c *collector) waitCount(t *testing.T, n int, timeout time.Duration) []collected {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := c.all()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("collected %d of %d messages within %s", len(got), n, timeout)
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
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

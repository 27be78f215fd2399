package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/streams"
	"github.com/throttler/throttler/tenant"
	"github.com/throttler/throttler/throttle"
)

// BenchmarkWorkerThroughput measures end-to-end jobs/s through a durable
// pull consumer, from the first pull until every job is acked, with a
// handler that does nothing and limits no tenant reaches:
//
//   - bare: a plain Fetch-and-ack loop, no worker;
//   - worker-throttle-off: the Worker with a Decider that admits everything
//     without Redis;
//   - worker-throttled: the Worker with a real throttle.Limiter on Redis;
//   - worker-redis-noop: the Worker with a Decider that makes the same
//     pipelined round trip as the Limiter, one EVALSHA per job, of a script
//     that only returns ALLOWED: the cost of a decision apart from the
//     throttle script's own work.
//
// The -fetch256 variants repeat them pulling 256 messages at a time instead
// of 64. Every iteration pre-publishes throughputJobs jobs over
// throughputTenants tenants to a fresh stream (untimed). All variants of one
// run share one in-process nats-server and one redis-server.
//
// Besides jobs/s, each variant reports the CPU time per job of this process
// (worker and nats-server together) and of redis-server. The worker ones
// also report the share of the time spent inside DecideBatch, the jobs per
// decision and the messages asked for per pull; the two that call Redis
// report Redis' time per EVALSHA as well.
//
//	go test -run '^$' -bench BenchmarkWorkerThroughput -benchtime 1x -count 3 ./consumer/
func BenchmarkWorkerThroughput(b *testing.B) {
	env := newThroughputEnv(b)
	limiter := env.limiter(b)
	noop := newNoopDecider(b, env.rdb)
	variants := []struct {
		name    string
		decider consumer.Decider // nil for the bare loop
		fetch   int
	}{
		{"bare", nil, 64},
		{"worker-throttle-off", admitAll{}, 64},
		{"worker-throttled", limiter, 64},
		{"worker-redis-noop", noop, 64},
		{"bare-fetch256", nil, 256},
		{"worker-throttle-off-fetch256", admitAll{}, 256},
		{"worker-throttled-fetch256", limiter, 256},
		{"worker-redis-noop-fetch256", noop, 256},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			var total runStats
			for range b.N {
				b.StopTimer()
				stream, cons := env.fill(b)
				env.resetRedisStats(b)
				b.StartTimer()
				var rs runStats
				if v.decider == nil {
					rs = env.runBare(b, cons, v.fetch)
				} else {
					rs = env.runWorker(b, cons, v.decider, v.fetch)
				}
				b.StopTimer()
				total.add(rs)
				env.drop(b, stream)
			}
			b.ReportMetric(float64(b.N*throughputJobs)/total.elapsed.Seconds(), "jobs/s")
			b.ReportMetric(perJob(total.procCPU, b.N), "proc-cpu-µs/job")
			b.ReportMetric(perJob(total.redisCPU, b.N), "redis-cpu-µs/job")
			if v.decider != nil {
				b.ReportMetric(100*total.deciding.Seconds()/total.elapsed.Seconds(), "%deciding")
				b.ReportMetric(float64(total.decided)/float64(total.decisions), "jobs/decision")
				b.ReportMetric(float64(total.asked)/float64(total.pulls), "asked/pull")
			}
			switch v.decider {
			case limiter:
				b.ReportMetric(env.redisUsecPerCall(b, "fcall"), "fcall-µs")
			case noop:
				b.ReportMetric(env.redisUsecPerCall(b, "evalsha"), "evalsha-µs")
			}
		})
	}
}

// BenchmarkWorkerThroughputRatio measures the target ratio itself, the
// worker throttled against the worker with the throttle off, in pairs run
// back to back (off, then throttled, each on a fresh stream of the same
// jobs), so that both sides of each ratio see the same machine. It reports
// the median, lowest and highest ratio of throughputPairs pairs, and the
// median jobs/s of each side. This machine's speed drifts by up to 2× over
// a minute; a ratio of one pair drifts far less.
//
//	go test -run '^$' -bench BenchmarkWorkerThroughputRatio -benchtime 1x ./consumer/
func BenchmarkWorkerThroughputRatio(b *testing.B) {
	env := newThroughputEnv(b)
	limiter := env.limiter(b)
	run := func(decider consumer.Decider) float64 {
		b.StopTimer()
		stream, cons := env.fill(b)
		b.StartTimer()
		rs := env.runWorker(b, cons, decider, 64)
		b.StopTimer()
		env.drop(b, stream)
		return float64(throughputJobs) / rs.elapsed.Seconds()
	}
	var ratios, offs, ons []float64
	for range b.N {
		for range throughputPairs {
			off := run(admitAll{})
			on := run(limiter)
			offs, ons, ratios = append(offs, off), append(ons, on), append(ratios, on/off)
		}
	}
	testenv.ReportRatios(b, ratios)
	b.ReportMetric(testenv.Median(offs), "off-jobs/s")
	b.ReportMetric(testenv.Median(ons), "throttled-jobs/s")
}

// throughputPairs is how many (off, throttled) pairs
// BenchmarkWorkerThroughputRatio runs.
const throughputPairs = 7

// limiter returns the Decider of a Limiter on e's Redis with limits no
// benchmark reaches.
func (e *throughputEnv) limiter(b *testing.B) *throttle.Decider {
	b.Helper()
	d, err := throttle.NewDecider(benchLimiter(b, e.rdb), nil)
	if err != nil {
		b.Fatalf("throttle.NewDecider: %v", err)
	}
	return d
}

// benchFailures returns the Failures of a Limiter on rdb with limits no
// benchmark reaches.
func benchFailures(b *testing.B, rdb *redis.Client) *throttle.Failures {
	b.Helper()
	f, err := throttle.NewFailures(benchLimiter(b, rdb), time.Hour)
	if err != nil {
		b.Fatalf("throttle.NewFailures: %v", err)
	}
	return f
}

// benchLimiter returns a Limiter on rdb with limits no benchmark
// reaches, its functions loaded.
func benchLimiter(b *testing.B, rdb *redis.Client) *throttle.Limiter {
	b.Helper()
	l, err := throttle.New(rdb, throttle.Options{
		Policies: throttle.Rules{Default: throttle.Enforce(throttle.PerSecond(throttle.MaxRate, throttle.MaxBurst))},
		Horizon:  time.Minute,
	})
	if err != nil {
		b.Fatalf("throttle.New: %v", err)
	}
	if err := l.Load(context.Background()); err != nil {
		b.Fatalf("Load: %v", err)
	}
	return l
}

// runStats is what one iteration measured.
type runStats struct {
	elapsed   time.Duration // from the first pull until every job was acked
	procCPU   time.Duration // CPU time of this process (worker and nats-server)
	redisCPU  time.Duration // CPU time of redis-server
	deciding  time.Duration // spent inside DecideBatch
	decisions int64         // DecideBatch calls
	decided   int64         // requests decided
	pulls     int64         // Fetch calls
	asked     int64         // messages asked for by Fetch calls
}

// add adds o to s.
func (s *runStats) add(o runStats) {
	s.elapsed += o.elapsed
	s.procCPU += o.procCPU
	s.redisCPU += o.redisCPU
	s.deciding += o.deciding
	s.decisions += o.decisions
	s.decided += o.decided
	s.pulls += o.pulls
	s.asked += o.asked
}

// perJob is d per job of n iterations, in µs.
func perJob(d time.Duration, n int) float64 {
	return float64(d.Microseconds()) / float64(n*throughputJobs)
}

// clock is a reading of wall time and of the CPU time used so far by this
// process and by redis-server.
type clock struct {
	wall        time.Time
	proc, redis time.Duration
}

// now reads the clock.
func (e *throughputEnv) now(b *testing.B) clock {
	b.Helper()
	return clock{wall: time.Now(), proc: procCPU(b), redis: e.redisCPU(b)}
}

// since returns the time elapsed since c, filled into a runStats.
func (e *throughputEnv) since(b *testing.B, c clock) runStats {
	b.Helper()
	d := e.now(b)
	return runStats{elapsed: d.wall.Sub(c.wall), procCPU: d.proc - c.proc, redisCPU: d.redis - c.redis}
}

// procCPU returns the CPU time this process has used (testenv.ProcessCPU).
func procCPU(b *testing.B) time.Duration {
	b.Helper()
	d, err := testenv.ProcessCPU()
	if err != nil {
		b.Fatal(err)
	}
	return d
}

const (
	// throughputJobs is the number of jobs each iteration consumes: a
	// multiple of both fetch sizes, so no pull waits for a partial batch.
	throughputJobs = 102_400
	// throughputTenants is the number of tenants the jobs are spread over.
	throughputTenants = 100
	// throughputSettle bounds how long one iteration may take.
	throughputSettle = 2 * time.Minute
)

// admitAll is the throttle switched off: it admits every job without Redis.
type admitAll struct{}

// DecideBatch implements consumer.Decider.
func (admitAll) DecideBatch(_ context.Context, reqs []throttle.Copy) []throttle.Result {
	res := make([]throttle.Result, len(reqs))
	for i := range res {
		res[i].Outcome = throttle.Admitted
	}
	return res
}

// noopDecider admits every job through the same pipelined round trip as the
// Limiter, one EVALSHA per job, but of a script that only returns ALLOWED:
// it shows what a decision costs apart from the throttle script's own work.
type noopDecider struct {
	rdb    *redis.Client
	script *redis.Script
}

// newNoopDecider loads the no-op script into Redis.
func newNoopDecider(b *testing.B, rdb *redis.Client) *noopDecider {
	b.Helper()
	d := &noopDecider{rdb: rdb, script: redis.NewScript("return {1, 0, 0, 0}")}
	if err := d.script.Load(context.Background(), rdb).Err(); err != nil {
		b.Fatalf("SCRIPT LOAD: %v", err)
	}
	return d
}

// DecideBatch implements consumer.Decider.
func (d *noopDecider) DecideBatch(ctx context.Context, reqs []throttle.Copy) []throttle.Result {
	pipe := d.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(reqs))
	for i, r := range reqs {
		cmds[i] = d.script.EvalSha(ctx, pipe, []string{"bench:{" + r.Tenant + "}", "bench:{" + r.Tenant + "}:" + r.JobID}, 0, r.Cost, 0, 1)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	res := make([]throttle.Result, len(reqs))
	for i, c := range cmds {
		if _, err := c.Int64Slice(); err != nil {
			res[i].Err = &throttle.RedisError{Op: "noop script", Err: err}
			continue
		}
		res[i].Outcome = throttle.Admitted
	}
	return res
}

// timedDecider measures the time a Worker spends inside DecideBatch. The
// worker calls it from one goroutine; the counters are read after Run returns.
type timedDecider struct {
	consumer.Decider
	busy      time.Duration
	decisions int64
	decided   int64
}

// DecideBatch implements consumer.Decider.
func (t *timedDecider) DecideBatch(ctx context.Context, reqs []throttle.Copy) []throttle.Result {
	start := time.Now()
	res := t.Decider.DecideBatch(ctx, reqs)
	t.busy += time.Since(start)
	t.decisions++
	t.decided += int64(len(reqs))
	return res
}

// countingConsumer counts the worker's pulls and the messages they ask for.
type countingConsumer struct {
	jetstream.Consumer
	pulls, asked atomic.Int64
}

// Fetch implements jetstream.Consumer.
func (c *countingConsumer) Fetch(n int, opts ...jetstream.FetchOpt) (jetstream.MessageBatch, error) {
	c.pulls.Add(1)
	c.asked.Add(int64(n))
	return c.Consumer.Fetch(n, opts...)
}

// throughputEnv is what every variant shares: the servers and clients.
type throughputEnv struct {
	js       jetstream.JetStream // consumes, acks and dead-letters
	pub      jetstream.JetStream // fills streams, on its own connection
	rdb      *redis.Client
	failures *throttle.Failures
	streams  int // streams made so far, to name the next one
}

// newThroughputEnv starts a nats-server and a redis-server for b.
func newThroughputEnv(b *testing.B) *throughputEnv {
	b.Helper()
	srv := testenv.StartNATS(b, "")
	rdb := testenv.StartRedis(b).Client(b)
	js, err := jetstream.New(srv.Connect(b))
	if err != nil {
		b.Fatalf("jetstream: %v", err)
	}
	pub, err := jetstream.New(srv.Connect(b), jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		b.Fatalf("jetstream: %v", err)
	}
	return &throughputEnv{js: js, pub: pub, rdb: rdb, failures: benchFailures(b, rdb)}
}

// fill creates a fresh stream bound to jobs.*, publishes throughputJobs
// jobs to it round-robin over the tenants, and returns it with a new durable
// consumer configured as the worker's (MaxAckPending 1000, AckWait 30s).
func (e *throughputEnv) fill(b *testing.B) (string, jetstream.Consumer) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), throughputSettle)
	defer cancel()
	e.streams++
	name := fmt.Sprintf("BENCH_%d", e.streams)
	stream, err := streams.EnsureStream(ctx, e.js, streams.StreamSpec{Name: name, Subjects: []string{"jobs.*"}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		// Frees jobs.* for the next variant when this one failed before drop.
		err := e.js.DeleteStream(context.Background(), name)
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			b.Errorf("delete stream %s: %v", name, err)
		}
	})
	payload := make([]byte, 64)
	acks := make([]jetstream.PubAckFuture, 0, throughputJobs)
	for i := range throughputJobs {
		subj := fmt.Sprintf("jobs.t%d", i%throughputTenants)
		// A loaded machine can keep 4096 acks outstanding for a while.
		ack, err := e.pub.PublishAsync(subj, payload, jetstream.WithStallWait(time.Minute))
		if err != nil {
			b.Fatalf("publish job %d: %v", i, err)
		}
		acks = append(acks, ack)
	}
	select {
	case <-e.pub.PublishAsyncComplete():
	case <-ctx.Done():
		b.Fatalf("publishing %d jobs: %v", throughputJobs, ctx.Err())
	}
	for i, ack := range acks {
		select {
		case err := <-ack.Err():
			b.Fatalf("publish job %d: %v", i, err)
		default:
		}
	}
	info, err := stream.Info(ctx)
	if err != nil {
		b.Fatalf("stream info: %v", err)
	}
	if info.State.Msgs != throughputJobs {
		b.Fatalf("stream %s holds %d jobs, want %d", name, info.State.Msgs, throughputJobs)
	}
	cons, err := streams.EnsureConsumer(ctx, e.js, streams.ConsumerSpec{
		Stream:         name,
		Name:           "bench",
		FilterSubjects: []string{"jobs.*"},
		MaxAckPending:  1000,
		AckWait:        30 * time.Second,
	})
	if err != nil {
		b.Fatal(err)
	}
	return name, cons
}

// drop deletes a stream once its iteration is over, freeing jobs.* for the
// next one.
func (e *throughputEnv) drop(b *testing.B, stream string) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.js.DeleteStream(ctx, stream); err != nil {
		b.Fatalf("delete stream %s: %v", stream, err)
	}
}

// runBare pulls batch messages at a time and acks each until every job is
// acked, and returns how long that took.
func (e *throughputEnv) runBare(b *testing.B, cons jetstream.Consumer, batch int) runStats {
	b.Helper()
	start := e.now(b)
	acked := 0
	for acked < throughputJobs {
		msgs, err := cons.Fetch(batch, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			b.Fatalf("fetch: %v", err)
		}
		for m := range msgs.Messages() {
			if err := m.Ack(); err != nil {
				b.Fatalf("ack: %v", err)
			}
			acked++
		}
		if err := msgs.Error(); err != nil {
			b.Fatalf("fetch after %d acks: %v", acked, err)
		}
	}
	testenv.WaitAcked(b, cons, throughputSettle)
	return e.since(b, start)
}

// runWorker runs a Worker over cons until its handler has seen every job
// and every job is acked, and returns how long that took. The worker's
// shutdown is not timed.
func (e *throughputEnv) runWorker(b *testing.B, cons jetstream.Consumer, decider consumer.Decider, fetchBatch int) runStats {
	b.Helper()
	timed := &timedDecider{Decider: decider}
	counted := &countingConsumer{Consumer: cons}
	var handled atomic.Int64
	all := make(chan struct{})
	w, err := consumer.New(consumer.Params{
		JetStream: e.js,
		Consumer:  counted,
		Decider:   timed,
		Failures:  e.failures,
		Handler: func(context.Context, consumer.Job) error {
			if handled.Add(1) == throughputJobs {
				close(all)
			}
			return nil
		},
		Deferrer: consumer.NakDeferrer{},
		Config: consumer.Config{
			Tenant:      tenant.FromSubject(2),
			Concurrency: 64,
			FetchBatch:  fetchBatch,
			Logger:      slog.New(slog.DiscardHandler),
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	start := e.now(b)
	go func() { ran <- w.Run(ctx) }()
	select {
	case <-all:
	case err := <-ran:
		b.Fatalf("worker stopped after %d jobs: %v", handled.Load(), err)
	case <-time.After(throughputSettle):
		b.Fatalf("worker handled %d of %d jobs in %s", handled.Load(), throughputJobs, throughputSettle)
	}
	testenv.WaitAcked(b, cons, throughputSettle)
	rs := e.since(b, start)
	rs.deciding, rs.decisions, rs.decided = timed.busy, timed.decisions, timed.decided
	rs.pulls, rs.asked = counted.pulls.Load(), counted.asked.Load()

	b.StopTimer()
	stop()
	if err := <-ran; err != nil {
		b.Fatalf("worker: %v", err)
	}
	if n := handled.Load(); n != throughputJobs {
		b.Fatalf("handler ran %d times for %d jobs", n, throughputJobs)
	}
	var admitted, deferred int64
	for _, s := range w.Stats() {
		admitted += s.Admitted
		deferred += s.Deferred + s.RedisErrors + s.DeadLettered
	}
	if admitted != throughputJobs || deferred != 0 {
		b.Fatalf("worker admitted %d and deferred, failed or dead-lettered %d of %d jobs", admitted, deferred, throughputJobs)
	}
	b.StartTimer()
	return rs
}

// resetRedisStats resets Redis' command statistics.
func (e *throughputEnv) resetRedisStats(b *testing.B) {
	b.Helper()
	if err := e.rdb.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatalf("CONFIG RESETSTAT: %v", err)
	}
}

// redisCPU returns the CPU time redis-server has used (testenv.RedisCPU).
func (e *throughputEnv) redisCPU(b *testing.B) time.Duration {
	b.Helper()
	d, err := testenv.RedisCPU(context.Background(), e.rdb)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// redisUsecPerCall reads Redis' CPU time per call of cmd (fcall: the
// engine's function calls; evalsha: the noop decider's script) since the
// last reset from INFO commandstats.
func (e *throughputEnv) redisUsecPerCall(b *testing.B, cmd string) float64 {
	b.Helper()
	stats, err := testenv.CommandStats(context.Background(), e.rdb)
	if err != nil {
		b.Fatal(err)
	}
	st, ok := stats[cmd]
	if !ok {
		b.Fatalf("INFO commandstats has no %s line: %v", cmd, stats)
	}
	return st.UsecPerCall
}

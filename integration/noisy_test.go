package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/internal/demo"
	"github.com/throttler/throttler/internal/ops"
	"github.com/throttler/throttler/internal/testenv"
)

// noisyScenario is the noisy-neighbour run: tenant A floods the queue with a
// backlog at once while tenant B publishes steadily under its limit.
type noisyScenario struct {
	aJobs         int           // jobs A publishes at once (0: B runs alone)
	aLimit        string        // A's limits
	aBurst        int           // A's burst, for its rate
	bRate         int           // B's jobs per second
	bLimit        string        // B's limits
	duration      time.Duration // how long B publishes
	maxAckPending int
	workers       int
	defer_        string // THROTTLER_DEFER
}

// tenantReport is what one tenant saw.
type tenantReport struct {
	published      int
	admitted       int // distinct jobs whose handler ran
	ranTwice       int
	p50, p99, max  time.Duration   // queue delay, publish → handler
	worst          []time.Duration // the five longest queue delays, longest first
	rate           float64         // sustained admitted rate while B ran, jobs/s (see runNoisy)
	busiestSecond  int             // most jobs admitted within any one second, from rateFrom on
	overQuota      float64         // most jobs admitted by any time past burst + rate × (time since the first publish)
	rateFromStart  float64         // admitted after the burst / time since before the burst
	deliveries     float64         // per admitted job: moves + deliveries of its last incarnation
	redisPerJob    float64         // throttle decisions per job delivered at least once
	decisions      int64
	seenJobs       int64
	moved          int64
	pendingAtEnd   int // A only: still waiting (scheduled, ack-pending or undelivered)
	admittedInTime []time.Time
}

// noisyReport is the outcome of a run.
type noisyReport struct {
	a, b          tenantReport
	maxAckPending int // largest num_ack_pending sampled every 100 ms
	// burstPassed is how long after A's burst was stored the consumer had
	// delivered all of it (sampled every 100 ms, so up to 100 ms late): a
	// job of B stored before then waits for it. Zero when A sends nothing.
	burstPassed      time.Duration
	scriptCalls      int // EVALSHA + EVAL calls Redis served: one per tenant per pulled batch
	effectiveDefer   string
	ackPendingLimit  int
	runFor, drainFor time.Duration
}

// noisyRecorder records each admitted job.
type noisyRecorder struct {
	mu      sync.Mutex
	delays  map[string][]time.Duration
	at      map[string][]time.Time
	runs    map[string]int
	deliv   map[string][]float64
	stopped atomic.Bool
	bWant   int           // how many jobs B publishes
	bAll    chan struct{} // closed once bWant of B's jobs ran
}

func (r *noisyRecorder) handle(_ context.Context, job consumer.Job) error {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs[job.ID]++
	if r.runs[job.ID] > 1 {
		return nil
	}
	r.delays[job.Tenant] = append(r.delays[job.Tenant], now.Sub(job.Published))
	r.at[job.Tenant] = append(r.at[job.Tenant], now)
	r.deliv[job.Tenant] = append(r.deliv[job.Tenant], float64(job.Deferrals)+float64(job.Delivered))
	if job.Tenant == "b" && len(r.delays["b"]) == r.bWant {
		close(r.bAll)
	}
	return nil
}

// runNoisy runs one scenario on its own servers and reports it.
func runNoisy(tb testing.TB, sc noisyScenario) noisyReport {
	tb.Helper()
	ns := testenv.StartNATS(tb, "")
	rs := testenv.StartRedis(tb)
	nc := ns.Connect(tb)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatalf("jetstream: %v", err)
	}
	cfg, err := app.LoadSettingsFrom(map[string]string{
		"NATS_URL":                   ns.URL(),
		"REDIS_URL":                  rs.URL(),
		"THROTTLER_TENANT_LIMITS":    "a=" + sc.aLimit + ",b=" + sc.bLimit,
		"THROTTLER_MAX_ACK_PENDING":  strconv.Itoa(sc.maxAckPending),
		"THROTTLER_CONCURRENCY":      "32",
		"THROTTLER_DEFER":            sc.defer_,
		"THROTTLER_SHUTDOWN_TIMEOUT": "5s",
		"THROTTLER_LOG_LEVEL":        "error",
		"THROTTLER_FETCH_BATCH":      getenv("NOISY_FETCH"),
	})
	if err != nil {
		tb.Fatalf("config: %v", err)
	}
	// B publishes bRate jobs a second for the whole duration, from the end
	// of A's burst: duration × bRate jobs.
	bJobs := int(sc.duration * time.Duration(sc.bRate) / time.Second)
	rec := &noisyRecorder{delays: map[string][]time.Duration{}, at: map[string][]time.Time{}, runs: map[string]int{}, deliv: map[string][]float64{},
		bWant: bJobs, bAll: make(chan struct{})}
	log := slog.New(slog.NewTextHandler(logSink(), &slog.HandlerOptions{Level: slog.LevelError}))

	// Workers.
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		workers []*consumer.Worker
	)
	for i := 0; i < sc.workers; i++ {
		wnc := ns.Connect(tb)
		rdb := rs.Client(tb)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := app.Run(ctx, cfg, app.Options{NATS: wnc, Redis: rdb, Handler: rec.handle, Logger: log,
				OnWorker: func(w *consumer.Worker) { mu.Lock(); workers = append(workers, w); mu.Unlock() }}); err != nil {
				tb.Errorf("worker: %v", err)
			}
		}()
	}
	stopWorkers := func() {
		cancel()
		wg.Wait()
	}
	defer stopWorkers()
	testenv.Eventually(tb, 10*time.Second, "workers ready", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(workers) == sc.workers
	})
	cons, err := js.Consumer(context.Background(), cfg.Stream, cfg.Consumer)
	if err != nil {
		tb.Fatalf("consumer: %v", err)
	}

	// Sample num_ack_pending every 100 ms, and the moment the consumer has
	// delivered the last job of A's burst.
	sampler := startAckPendingSampler(cons)

	// A publishes its whole backlog at once; B publishes steadily.
	start := time.Now()
	aIDs, aLastSeq := publishBurst(tb, js, "jobs.a", sc.aJobs)
	stored := time.Now()
	sampler.burstStored(aLastSeq)
	bPublished := 0
	tick := time.NewTicker(time.Second / time.Duration(sc.bRate))
	for bPublished < bJobs {
		<-tick.C
		ctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := js.Publish(ctx, "jobs.b", []byte("b")); err != nil {
			tb.Fatalf("publish b: %v", err)
		}
		c()
		bPublished++
	}
	tick.Stop()
	runFor := time.Since(start)
	// Let B's last jobs through, then stop. Not for more than 30 s: with
	// NAK-only deferral they may be stuck behind A's backlog for minutes,
	// and the report counts a job never run as waiting the whole run.
	select {
	case <-rec.bAll:
	case <-time.After(30 * time.Second):
	}
	maxPending, passedAt := sampler.stop()
	stopWorkers()
	scriptCalls := functionCalls(tb, rs.Client(tb))

	rep := noisyReport{maxAckPending: maxPending, ackPendingLimit: sc.maxAckPending, runFor: runFor, scriptCalls: scriptCalls}
	if !passedAt.IsZero() {
		rep.burstPassed = passedAt.Sub(stored)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rep.b.published = bPublished
	for t, tr := range map[string]*tenantReport{"a": &rep.a, "b": &rep.b} {
		d := append([]time.Duration(nil), rec.delays[t]...)
		tr.admitted = len(d)
		// A job of B never handled counts as waiting at least the whole run.
		for t == "b" && len(d) < bPublished {
			d = append(d, time.Since(start))
		}
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		if len(d) > 0 {
			tr.p50 = demo.Percentile(d, 0.50)
			tr.p99 = demo.Percentile(d, 0.99)
			tr.max = d[len(d)-1]
			for i := len(d) - 1; i >= 0 && i >= len(d)-5; i-- {
				tr.worst = append(tr.worst, d[i].Round(time.Millisecond))
			}
		}
		var deliv float64
		for _, x := range rec.deliv[t] {
			deliv += x
		}
		if len(rec.deliv[t]) > 0 {
			tr.deliveries = deliv / float64(len(rec.deliv[t]))
		}
		tr.admittedInTime = append([]time.Time(nil), rec.at[t]...)
		mu.Lock()
		for _, w := range workers {
			st := w.Stats()[t]
			tr.decisions += st.RedisCalls
			tr.moved += st.Moved
		}
		mu.Unlock()
	}
	for id, n := range rec.runs {
		if n > 1 {
			if _, ok := aIDs[id]; ok {
				rep.a.ranTwice++
			} else {
				rep.b.ranTwice++
			}
		}
	}
	rep.a.published, rep.b.published = len(aIDs), bPublished
	rep.a.seenJobs = int64(len(aIDs))
	rep.b.seenJobs = int64(bPublished)
	for _, tr := range []*tenantReport{&rep.a, &rep.b} {
		if tr.seenJobs > 0 {
			tr.redisPerJob = float64(tr.decisions) / float64(tr.seenJobs)
		}
	}
	// A's sustained rate while B ran. The server fires schedules in batches
	// (at most every 250 ms), so once its first moved jobs come back A is
	// admitted in steps: a count over a window swings by up to one step with
	// the window's ends. rate is the least-squares slope of A's admissions over
	// time from rateFrom after the start (past the NAK'd start-up and the
	// first moved jobs) to the end of the run, which the steps do not move;
	// rateFromStart is the older figure, admissions after the burst over the
	// time from before A's burst was published to A's last admission.
	if n := len(rep.a.admittedInTime); n > sc.aBurst+1 {
		at := rep.a.admittedInTime
		sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
		end := start.Add(runFor)
		var inRun []time.Time
		for _, x := range at {
			if !x.After(end) {
				inRun = append(inRun, x)
			}
		}
		if len(inRun) > sc.aBurst+1 {
			rep.a.rateFromStart = float64(len(inRun)-sc.aBurst) / inRun[len(inRun)-1].Sub(start).Seconds()
		}
		var ts, ks []float64
		for k, x := range inRun {
			if x.Sub(start) >= rateFrom {
				ts, ks = append(ts, x.Sub(start).Seconds()), append(ks, float64(k))
			}
		}
		rep.a.rate = slope(ts, ks)
		rep.a.busiestSecond = busiestSecond(inRun, start.Add(rateFrom))
	}
	// Still waiting in the stream: A's jobs, and B's never handled.
	rep.a.pendingAtEnd = pendingJobs(tb, js, cfg) - (rep.b.published - rep.b.admitted)
	return rep
}

// rateFrom is where the measure of A's sustained rate starts, after the
// start of a noisy run.
const rateFrom = 5 * time.Second

// overQuota is how far the sorted admission times ever run ahead of what a
// limit of rate a second with burst allows from start: the most, over
// every admission, of the jobs admitted by then less burst + rate × the
// time since start. The throttle holds it at or below 0; a job held up past
// its slot and run late (a catch-up) never raises it.
func overQuota(at []time.Time, start time.Time, rate, burst float64) float64 {
	worst := math.Inf(-1)
	for k, t := range at {
		worst = max(worst, float64(k+1)-burst-rate*t.Sub(start).Seconds())
	}
	return worst
}

// busiestSecond is the most of the sorted times at or after from that fall
// within any one second (a sliding window).
func busiestSecond(at []time.Time, from time.Time) int {
	best, lo := 0, 0
	for hi := range at {
		if at[hi].Before(from) {
			lo = hi + 1
			continue
		}
		for at[hi].Sub(at[lo]) >= time.Second {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// slope is the least-squares slope of ys over xs, or 0 with fewer than two
// distinct xs.
func slope(xs, ys []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= float64(len(xs))
	my /= float64(len(ys))
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	if sxx == 0 {
		return 0
	}
	return sxy / sxx
}

// TestSlope checks the rate estimator on a line and on steps.
func TestSlope(t *testing.T) {
	if got := slope([]float64{1, 2, 3}, []float64{3, 5, 7}); got != 2 {
		t.Fatalf("slope of y = 2x+1: %v, want 2", got)
	}
	// 100 admissions at the start of each of 20 seconds: 100/s whatever
	// the phase of the steps.
	var xs, ys []float64
	for sec := range 20 {
		for k := range 100 {
			xs, ys = append(xs, float64(sec)+0.3+float64(k)*0.001), append(ys, float64(len(ys)))
		}
	}
	if got := slope(xs, ys); got < 99 || got > 101 {
		t.Fatalf("slope of 100-job steps every second: %v, want 100 ± 1", got)
	}
	if got := slope([]float64{1}, []float64{1}); got != 0 {
		t.Fatalf("slope of one point: %v, want 0", got)
	}
}

// TestBusiestSecond checks the sliding one-second count.
func TestOverQuota(t *testing.T) {
	start := time.Unix(100, 0)
	at := []time.Time{start, start, start.Add(time.Second), start.Add(2 * time.Second)}
	// 2 by 0 s against 1 + 0: 1 over; 3 by 1 s against 1 + 1: 1 over; 4 by 2 s against 3: 1 over.
	if got := overQuota(at, start, 1, 1); got != 1 {
		t.Errorf("overQuota = %v, want 1", got)
	}
	if got := overQuota(at, start, 1, 2); got != 0 {
		t.Errorf("overQuota with a burst of 2 = %v, want 0", got)
	}
}

func TestBusiestSecond(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms ...int) []time.Time {
		var out []time.Time
		for _, m := range ms {
			out = append(out, t0.Add(time.Duration(m)*time.Millisecond))
		}
		return out
	}
	tests := []struct {
		name string
		at   []time.Time
		from time.Time
		want int
	}{
		{name: "none", want: 0},
		{name: "one", at: at(5), from: t0, want: 1},
		{name: "a window is shorter than a second", at: at(0, 500, 1000), from: t0, want: 2},
		{name: "two steps across a boundary", at: at(900, 950, 1000, 1100, 1850, 2000), from: t0, want: 5},
		{name: "before from is left out", at: at(0, 100, 200, 300), from: t0.Add(150 * time.Millisecond), want: 2},
	}
	for _, tt := range tests {
		if got := busiestSecond(tt.at, tt.from); got != tt.want {
			t.Errorf("%s: busiestSecond = %d, want %d", tt.name, got, tt.want)
		}
	}
}

// ackPendingSampler reads a consumer's info every 100 ms, keeping the
// largest num_ack_pending and the first time the consumer had delivered the
// last message of a burst.
type ackPendingSampler struct {
	maxPending atomic.Int64
	lastSeq    atomic.Uint64 // the burst's last stream sequence, once stored
	passedAt   atomic.Int64  // UnixNano of the first sample past it
	cancel     context.CancelFunc
	done       chan struct{}
}

// startAckPendingSampler starts sampling cons until stop.
func startAckPendingSampler(cons jetstream.Consumer) *ackPendingSampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &ackPendingSampler{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			ictx, c := context.WithTimeout(ctx, time.Second)
			info, err := cons.Info(ictx)
			c()
			if err != nil {
				continue
			}
			if int64(info.NumAckPending) > s.maxPending.Load() {
				s.maxPending.Store(int64(info.NumAckPending))
			}
			if last := s.lastSeq.Load(); last > 0 && info.Delivered.Stream >= last && s.passedAt.Load() == 0 {
				s.passedAt.Store(time.Now().UnixNano())
			}
		}
	}()
	return s
}

// burstStored tells the sampler the stream sequence of a burst's last
// message (0: there was no burst).
func (s *ackPendingSampler) burstStored(lastSeq uint64) { s.lastSeq.Store(lastSeq) }

// stop ends the sampling and returns the largest num_ack_pending seen and
// when the burst was first seen delivered (zero if never).
func (s *ackPendingSampler) stop() (maxPending int, passedAt time.Time) {
	s.cancel()
	<-s.done
	if at := s.passedAt.Load(); at > 0 {
		passedAt = time.Unix(0, at)
	}
	return int(s.maxPending.Load()), passedAt
}

// publishBurst publishes n jobs at once, asynchronously, and returns their ids
// and the stream sequence of the last.
func publishBurst(tb testing.TB, js jetstream.JetStream, subject string, n int) (map[string]bool, uint64) {
	tb.Helper()
	ids := make(map[string]bool, n)
	var last uint64
	futures := make([]jetstream.PubAckFuture, 0, n)
	for i := 0; i < n; i++ {
		f, err := js.PublishMsgAsync(&nats.Msg{Subject: subject, Data: []byte("a")})
		if err != nil {
			tb.Fatalf("publish %s: %v", subject, err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case ack := <-f.Ok():
			ids[jobID(ack.Stream, ack.Sequence)] = true
			last = max(last, ack.Sequence)
		case err := <-f.Err():
			tb.Fatalf("publish %s: %v", subject, err)
		case <-time.After(30 * time.Second):
			tb.Fatalf("publish %s: no ack", subject)
		}
	}
	return ids, last
}

// pendingJobs counts jobs still waiting in the stream: moved jobs (copies
// and bundles), ack-pending and undelivered messages of the consumer. The
// workers are stopped, but schedules keep firing, moving jobs from the
// schedule subjects to the consumer between the two reads: the count is
// taken until two in a row agree.
func pendingJobs(tb testing.TB, js jetstream.JetStream, cfg *app.Settings) int {
	tb.Helper()
	last := -1
	for range 10 {
		n := countPending(tb, js, cfg)
		if n == last {
			return n
		}
		last = n
	}
	tb.Fatalf("the count of waiting jobs did not settle: last %d", last)
	return 0
}

// countPending is one count of pendingJobs.
func countPending(tb testing.TB, js jetstream.JetStream, cfg *app.Settings) int {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := js.Consumer(ctx, cfg.Stream, cfg.Consumer)
	if err != nil {
		tb.Fatalf("consumer: %v", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		tb.Fatalf("consumer info: %v", err)
	}
	waiting, err := ops.WaitingInSchedules(ctx, js, cfg.Stream, cfg.Schedules)
	if err != nil {
		tb.Fatalf("jobs waiting in schedules: %v", err)
	}
	n := info.NumAckPending + int(info.NumPending) + waiting
	// Jobs the fast lane copied wait in a consumer of their own.
	fast, err := js.Consumer(ctx, cfg.Stream, cfg.Consumer+"_fast")
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return n
	}
	if err != nil {
		tb.Fatalf("fast consumer: %v", err)
	}
	if info, err = fast.Info(ctx); err != nil {
		tb.Fatalf("fast consumer info: %v", err)
	}
	return n + info.NumAckPending + int(info.NumPending)
}

// functionCalls is how many calls of the engine's functions (FCALL) Redis
// has served.
func functionCalls(tb testing.TB, rdb *redis.Client) int {
	tb.Helper()
	stats, err := testenv.CommandStats(context.Background(), rdb)
	if err != nil {
		tb.Fatal(err)
	}
	return int(stats["fcall"].Calls)
}

// String formats a report as table rows.
func (r noisyReport) String() string {
	row := func(name string, t tenantReport) string {
		return fmt.Sprintf("%s: published %d, admitted %d, ran twice %d, delay p50 %s p99 %s max %s, rate %.1f/s (from start %.1f/s, busiest second %d), %.2f deliveries/job, %.2f redis calls/job, moved %d, pending %d",
			name, t.published, t.admitted, t.ranTwice, t.p50.Round(time.Millisecond), t.p99.Round(time.Millisecond), t.max.Round(time.Millisecond),
			t.rate, t.rateFromStart, t.busiestSecond, t.deliveries, t.redisPerJob, t.moved, t.pendingAtEnd)
	}
	passed := "not delivered in the run"
	switch {
	case r.a.published == 0:
		passed = "was not sent"
	case r.burstPassed > 0:
		passed = "delivered " + r.burstPassed.Round(time.Millisecond).String() + " after it was stored"
	}
	return fmt.Sprintf("%s\n%s\nB's five longest delays %v; A's burst %s\nmax num_ack_pending %d of %d; %d script calls to Redis for %d decisions",
		row("A", r.a), row("B", r.b), r.b.worst, passed, r.maxAckPending, r.ackPendingLimit, r.scriptCalls, r.a.decisions+r.b.decisions)
}

// TestNoisyNeighbourSmall is the noisy-neighbour scenario at a small scale,
// asserting order and loss rather than speed: B's jobs never wait behind A's
// backlog, A's jobs are neither lost nor run twice, and A's waiting jobs do
// not hold the consumer's ack-pending slots.
func TestNoisyNeighbourSmall(t *testing.T) {
	rep := runNoisy(t, noisyScenario{
		aJobs: 2000, aLimit: "100/s:10", aBurst: 10,
		bRate: 10, bLimit: "100/s:10",
		duration: 3 * time.Second, maxAckPending: 1000, workers: 2, defer_: "auto",
	})
	t.Log(rep)
	if rep.b.admitted != rep.b.published {
		t.Errorf("B: %d of %d jobs handled", rep.b.admitted, rep.b.published)
	}
	// A's backlog is 20 s long; a B job that waited behind it would show.
	if rep.b.max > 5*time.Second {
		t.Errorf("B's slowest job waited %s: it was stuck behind A's backlog", rep.b.max)
	}
	if rep.a.ranTwice+rep.b.ranTwice > 0 {
		t.Errorf("%d jobs of A and %d of B ran twice", rep.a.ranTwice, rep.b.ranTwice)
	}
	if rep.a.admitted+rep.a.pendingAtEnd != rep.a.published {
		t.Errorf("A: admitted %d + still waiting %d != published %d: jobs lost", rep.a.admitted, rep.a.pendingAtEnd, rep.a.published)
	}
	if rep.a.admitted > 10+100*int(rep.runFor.Seconds()+2) {
		t.Errorf("A: %d admitted in %s at 100/s", rep.a.admitted, rep.runFor)
	}
	if rep.maxAckPending > rep.ackPendingLimit/2 {
		t.Errorf("num_ack_pending reached %d, above half of MaxAckPending %d", rep.maxAckPending, rep.ackPendingLimit)
	}
	if rep.a.moved == 0 {
		t.Errorf("no job of A was moved off the consumer")
	}
}

// BenchmarkNoisyNeighbour runs the noisy-neighbour scenario at full scale:
// A publishes 20,000 jobs at once (limit 100/s), B publishes 10/s for 30 s
// (limit 100/s), MaxAckPending 1,000, two workers; with THROTTLER_DEFER=auto
// and =nak, and B alone for its baseline. Run it with
//
//	go test -run '^$' -bench NoisyNeighbour -benchtime 1x -timeout 30m ./integration/
func BenchmarkNoisyNeighbour(b *testing.B) {
	base := noisyScenario{
		aJobs: 20000, aLimit: "100/s:10", aBurst: 10,
		bRate: 10, bLimit: "100/s:10",
		duration: 30 * time.Second, maxAckPending: 1000, workers: 2,
	}
	if d, err := time.ParseDuration(benchDuration()); err == nil {
		base.duration = d
	}
	var alone noisyReport
	for _, v := range []struct {
		name   string
		mutate func(*noisyScenario)
	}{
		{"b-alone", func(s *noisyScenario) { s.aJobs = 0; s.defer_ = "auto" }},
		{"auto", func(s *noisyScenario) { s.defer_ = "auto" }},
		{"nak", func(s *noisyScenario) { s.defer_ = "nak" }},
	} {
		b.Run(v.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				sc := base
				v.mutate(&sc)
				rep := runNoisy(b, sc)
				if v.name == "b-alone" {
					alone = rep
				}
				b.Logf("\n%s", rep)
				b.ReportMetric(float64(rep.b.p99.Microseconds())/1000, "B-p99-ms")
				if alone.b.p99 > 0 {
					b.ReportMetric(float64(rep.b.p99)/float64(alone.b.p99), "B-p99/alone")
				}
				b.ReportMetric(rep.a.rate, "A-jobs/s")
				b.ReportMetric(rep.a.rateFromStart, "A-jobs/s-from-start")
				b.ReportMetric(float64(rep.a.busiestSecond), "A-busiest-second")
				b.ReportMetric(float64(rep.maxAckPending)/float64(sc.maxAckPending)*100, "max-ack-pending-%")
				if rep.burstPassed > 0 {
					b.ReportMetric(float64(rep.burstPassed.Milliseconds()), "A-burst-passed-ms")
				}
				b.ReportMetric(rep.a.redisPerJob, "A-redis/job")
				b.ReportMetric(rep.a.deliveries, "A-deliveries/job")
				b.ReportMetric(rep.b.redisPerJob, "B-redis/job")
				b.ReportMetric(rep.b.deliveries, "B-deliveries/job")
			}
		})
	}
}

// benchDuration lets NOISY_DURATION shorten the benchmark while iterating.
func benchDuration() string { return getenv("NOISY_DURATION") }

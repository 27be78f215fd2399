package integration

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/internal/testenv"
)

// Sliding-window workload: one tenant under slidingSpec, offered three
// times its rate for slidingPublish, watched until slidingRun.
const (
	slidingSpec    = "sliding:50/10s"
	slidingN       = 50
	slidingSpan    = 10 * time.Second
	slidingOffered = 15 // jobs a second: 3 × 50/10 s
	slidingPublish = 60 * time.Second
	slidingRun     = 90 * time.Second // from the first publish to the end
)

// BenchmarkSlidingWindowProcesses runs sliding:50/10s with every part a
// process of its own: a nats-server built from the module, the machine's
// redis-server and two throttler binaries forwarding to done.<tenant>.
// One tenant is offered 15 jobs/s (3×) for 60 s; the benchmark watches
// the forwards for 90 s from the first publish and reports, for every
// job, the jobs in the 10 s span ending at it and the one starting at
// it, by forward (received here), by admission as the forwards tell it
// (the slot in a moved job's Throttler-Slot header, else its forward or
// publish) and by the window's own record in Redis (its members, each an
// admission's slot, read every second): at most 50 is the target. The
// header's slot is the worker's clock plus the wait, a few ms off the
// slot Redis keeps, so only the record counts admissions exactly; the
// forwards add their own jitter. The steady rate is over whole periods after the first span:
// from job 51 to job 51 + 50·m, m as large as the run allows, so that
// the bursts of a window log (50 jobs, then a wait) count whole; the
// target is 5/s within 1%. Nothing lost: every published job is
// forwarded once or still waits in the stream when the workers stop.
//
//	go test -run '^$' -bench SlidingWindowProcesses -benchtime 1x -timeout 10m ./integration/
func BenchmarkSlidingWindowProcesses(b *testing.B) {
	bins := binaries{throttler: buildThrottler(b), natsServer: buildNATSServer(b)}
	for i := 0; i < b.N; i++ {
		r := runSlidingProcesses(b, bins)
		b.Logf("%s, offered %d/s for %s: published %d, forwarded %d (twice %d), waiting at the end %d, lost %d",
			slidingSpec, slidingOffered, slidingPublish, r.published, r.forwarded, r.twice, r.waiting, r.lost)
		b.Logf("most in a %s span (target <= %d): by forward ending at a job %d, starting at a job %d; by admission ending %d, starting %d; both edges in [t-D, t]: by forward %d, by admission %d; %d of %d forwards carried a slot",
			slidingSpan, slidingN, r.fwd.ending, r.fwd.starting, r.adm.ending, r.adm.starting, r.fwd.closed, r.adm.closed, r.slotted, r.forwarded)
		b.Logf("by admission, taking a job admitted at once as admitted at its publish: most %d ending at a job, %d both edges in",
			r.admSent.ending, r.admSent.closed)
		b.Logf("by the window's own record in Redis (%d admissions): most %d ending at one, %d both edges in; rate over whole periods %.4f/s",
			r.recorded, r.redis.ending, r.redis.closed, r.redis.rate)
		b.Logf("steady rate (target 5/s ±1%%) over jobs %d..%d: by forward %.4f/s, by admission %.4f/s; jobs %d..%d end to end by forward %.4f/s",
			slidingN+1, slidingN+1+r.periodJobs, r.fwd.rate, r.adm.rate, slidingN+1, r.forwarded, r.fwd.rawRate)
		b.Logf("forward less slot (%d jobs): %s; forward less publish of the jobs without a slot (%d): %s",
			len(r.lateSlot), spread(r.lateSlot), len(r.lateSent), spread(r.lateSent))
		b.Logf("deliveries: %.0f for %d published jobs (%.2f a job), moved %.0f", r.delivered, r.published, r.delivered/float64(r.published), r.moved)
		b.ReportMetric(float64(r.fwd.ending), "most-in-span-fwd")
		b.ReportMetric(float64(r.fwd.starting), "most-in-span-fwd-start")
		b.ReportMetric(float64(r.adm.ending), "most-in-span-adm")
		b.ReportMetric(float64(r.adm.starting), "most-in-span-adm-start")
		b.ReportMetric(float64(r.admSent.ending), "most-in-span-adm-pub")
		b.ReportMetric(float64(r.redis.ending), "most-in-span-redis")
		b.ReportMetric(r.redis.rate, "rate-redis/s")
		b.ReportMetric(r.fwd.rate, "rate-fwd/s")
		b.ReportMetric(r.adm.rate, "rate-adm/s")
		b.ReportMetric(float64(r.lost), "lost-jobs")
		b.ReportMetric(float64(r.twice), "twice-jobs")
		b.ReportMetric(r.delivered/float64(r.published), "deliveries/job")
	}
}

// slidingReport is one run of the sliding-window workload.
type slidingReport struct {
	published, forwarded, twice, waiting, lost int
	slotted                                    int // forwards with a Throttler-Slot header
	periodJobs                                 int // 50·m, the jobs the steady rate spans
	// fwd is by forward; adm by slot, else forward (the latest a job
	// admitted at once can have been admitted); admSent by slot, else
	// publish (the earliest).
	fwd, adm, admSent spanCounts
	// redis is by the slots the window recorded (its members, sampled
	// every second), recorded how many.
	redis            spanCounts
	recorded         int
	delivered, moved float64 // the workers' counters, summed
	// lateSlot is forward less slot of each job with a slot, lateSent
	// forward less publish of the others (admitted when first decided).
	lateSlot, lateSent []time.Duration
}

// spread is the least, median and most of d, rounded to the millisecond.
func spread(d []time.Duration) string {
	if len(d) == 0 {
		return "none"
	}
	slices.Sort(d)
	r := func(x time.Duration) time.Duration { return x.Round(time.Millisecond) }
	return fmt.Sprintf("min %s p50 %s max %s", r(d[0]), r(d[len(d)/2]), r(d[len(d)-1]))
}

// spanCounts are one series of times measured against the window.
type spanCounts struct {
	ending, starting int     // most in (t−D, t] and in [t, t+D) over every job's t
	closed           int     // most in [t−D, t], both edges in
	rate             float64 // jobs per second over whole periods after the first span
	rawRate          float64 // from job N+1 to the last, whatever its phase
}

// runSlidingProcesses runs the workload once on servers of its own.
func runSlidingProcesses(tb testing.TB, bins binaries) slidingReport {
	tb.Helper()
	natsURL := startNATSProcess(tb, bins.natsServer)
	rs := testenv.StartRedis(tb)
	nc, err := nats.Connect(natsURL)
	must(tb, err, "connect")
	defer nc.Close()
	js, err := jetstream.New(nc)
	must(tb, err, "jetstream")

	type forward struct {
		id             string
		at, slot, sent time.Time // slot: zero without a Throttler-Slot header
	}
	var (
		mu       sync.Mutex
		forwards []forward
	)
	sub, err := nc.Subscribe("done.*", func(m *nats.Msg) {
		f := forward{id: m.Header.Get("Job"), at: time.Now()}
		if ns, err := strconv.ParseInt(m.Header.Get("Sent"), 10, 64); err == nil {
			f.sent = time.Unix(0, ns)
		}
		if us, err := strconv.ParseInt(m.Header.Get(header.Slot), 10, 64); err == nil && us > 0 {
			f.slot = time.UnixMicro(us)
		}
		mu.Lock()
		forwards = append(forwards, f)
		mu.Unlock()
	})
	must(tb, err, "subscribe done.*")
	must(tb, sub.SetPendingLimits(-1, -1), "pending limits")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	vars := map[string]string{
		"NATS_URL":                   natsURL,
		"REDIS_URL":                  rs.URL(),
		"THROTTLER_DEFAULT_LIMIT":    slidingSpec,
		"THROTTLER_SHUTDOWN_TIMEOUT": "5s",
		"THROTTLER_LOG_LEVEL":        "warn",
	}
	cfg, err := app.LoadSettingsFrom(vars)
	must(tb, err, "config")
	addrs, stopWorkers := startThrottlerProcesses(tb, ctx, bins.throttler, vars, 2)
	defer stopWorkers()
	testenv.Eventually(tb, 10*time.Second, "the workers' consumer", func() bool {
		_, err := js.Consumer(context.Background(), cfg.Stream, cfg.Consumer)
		return err == nil
	})
	// Redis's own record of the admissions: the window's members, read
	// every second (a member stays at least the span).
	rdb := rs.Client(tb)
	recorded := map[string]bool{}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var sampling sync.WaitGroup
	sampling.Go(func() {
		for sampleCtx.Err() == nil {
			keys, _ := rdb.Keys(sampleCtx, "*{acme}:z:*").Result()
			for _, k := range keys {
				members, _ := rdb.ZRange(sampleCtx, k, 0, -1).Result()
				for _, m := range members {
					recorded[m] = true
				}
			}
			select {
			case <-sampleCtx.Done():
			case <-time.After(time.Second):
			}
		}
	})

	// 15 jobs a second in 100 ms ticks: 1 or 2 a tick, 150 every 10 s.
	const tick = 100 * time.Millisecond
	published := 0
	start := time.Now()
	for k := 0; k < int(slidingPublish/tick); k++ {
		for range slidingOffered*(k+1)/10 - slidingOffered*k/10 {
			m := nats.NewMsg("jobs.acme")
			m.Header.Set("Job", "j"+strconv.Itoa(published))
			m.Header.Set("Sent", strconv.FormatInt(time.Now().UnixNano(), 10))
			_, err := js.PublishMsgAsync(m)
			must(tb, err, "publish")
			published++
		}
		time.Sleep(time.Until(start.Add(time.Duration(k+1) * tick)))
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		tb.Fatalf("publish acks did not come")
	}
	time.Sleep(time.Until(start.Add(slidingRun)))
	stopSampling()
	sampling.Wait()

	counters := map[string]float64{}
	for _, addr := range addrs {
		m, err := scrape(addr)
		must(tb, err, "metrics")
		for k, v := range m {
			counters[k] += v
		}
	}
	stopWorkers()
	r := slidingReport{published: published, waiting: pendingJobs(tb, js, cfg),
		delivered: counters[`throttler_delivered_total{tenant="acme"}`], moved: counters[`throttler_moved_total{tenant="acme"}`]}
	mu.Lock()
	defer mu.Unlock()
	seen := map[string]bool{}
	var fwd, adm, admSent []time.Time
	for _, f := range forwards {
		if seen[f.id] {
			r.twice++
			continue
		}
		seen[f.id] = true
		fwd = append(fwd, f.at)
		a, as := f.at, f.sent
		if !f.slot.IsZero() {
			a, as = f.slot, f.slot
			r.slotted++
			r.lateSlot = append(r.lateSlot, f.at.Sub(f.slot))
		} else {
			r.lateSent = append(r.lateSent, f.at.Sub(f.sent))
		}
		adm, admSent = append(adm, a), append(admSent, as)
	}
	r.forwarded = len(fwd)
	r.lost = r.published - r.forwarded - r.waiting
	r.fwd, r.periodJobs = spansOf(fwd, slidingN, slidingSpan)
	r.adm, _ = spansOf(adm, slidingN, slidingSpan)
	r.admSent, _ = spansOf(admSent, slidingN, slidingSpan)
	var inRedis []time.Time
	for m := range recorded {
		slot, _, _ := strings.Cut(m, ":")
		if us, err := strconv.ParseInt(slot, 10, 64); err == nil {
			inRedis = append(inRedis, time.UnixMicro(us))
		}
	}
	r.recorded = len(inRedis)
	r.redis, _ = spansOf(inRedis, slidingN, slidingSpan)
	return r
}

// spansOf measures times against a window of n per span: the most in
// the span ending at each time, (t−span, t], and starting at it,
// [t, t+span), and the rate over whole periods after the first span (see
// BenchmarkSlidingWindowProcesses). It sorts at.
func spansOf(at []time.Time, n int, span time.Duration) (spanCounts, int) {
	var s spanCounts
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	lo := 0
	for hi := range at {
		for at[hi].Sub(at[lo]) >= span {
			lo++
		}
		s.ending = max(s.ending, hi-lo+1)
	}
	lo = 0
	for hi := range at {
		for at[hi].Sub(at[lo]) > span {
			lo++
		}
		s.closed = max(s.closed, hi-lo+1)
	}
	hi := 0
	for lo := range at {
		for hi < len(at) && at[hi].Sub(at[lo]) < span {
			hi++
		}
		s.starting = max(s.starting, hi-lo)
	}
	first := n // job n+1, counting from 1
	if len(at) <= first+n {
		return s, 0
	}
	jobs := (len(at) - 1 - first) / n * n
	s.rate = float64(jobs) / at[first+jobs].Sub(at[first]).Seconds()
	s.rawRate = float64(len(at)-1-first) / at[len(at)-1].Sub(at[first]).Seconds()
	return s, jobs
}

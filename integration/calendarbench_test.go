package integration

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/internal/testenv"
)

// Calendar-window workload: one tenant under calendarSpec, offered three
// times its N a minute for calendarPublish, watched until its backlog has
// run or calendarDrain has passed since the last publish.
const (
	calendarSpec    = "window:100/m"
	calendarN       = 100
	calendarOffered = 300 // jobs a minute: 3 × 100, one every 200 ms
	calendarPublish = 3 * time.Minute
	// calendarDrain is the most the backlog may take once publishing
	// ends: 900 jobs at 100 a minute end in the ninth minute, 6 after.
	calendarDrain = 8 * time.Minute
)

// BenchmarkCalendarWindowProcesses runs window:100/m with every part a
// process of its own: a nats-server built from the module, the machine's
// redis-server and two throttler binaries forwarding to done.<tenant>.
// One tenant is offered 300 jobs a minute (3×) for 3 minutes; the
// benchmark watches until every job has run (the backlog of about 600
// runs at 100 a minute, so about 9.5 minutes in all). Per calendar
// minute it counts the jobs run, by admission (a moved job's
// Throttler-Slot, else its forward) and by the window's own counts in
// Redis (its hash, read every 50 ms): exactly 100 in each is the
// target, the first and last minutes reported apart. A job that waited
// must not run before its slot's minute starts, and its slot must be that
// start (within 1 s: the header's slot is the worker's clock plus the
// wait). Nothing lost, nothing run twice: every published job is
// forwarded once. Deliveries per job that waited (admitted in a minute
// after its publish's): the workers' deliveries less one for each job run
// in the minute of its publish, against 2.
//
//	go test -run '^$' -bench CalendarWindowProcesses -benchtime 1x -timeout 20m ./integration/
func BenchmarkCalendarWindowProcesses(b *testing.B) {
	bins := binaries{throttler: buildThrottler(b), natsServer: buildNATSServer(b)}
	for i := 0; i < b.N; i++ {
		r := runCalendarProcesses(b, bins)
		r.log(b)
		r.check(b)
		b.ReportMetric(float64(r.fullMinutes), "full-minutes")
		b.ReportMetric(float64(r.offMinutes), "minutes-not-100")
		b.ReportMetric(float64(r.early), "early-jobs")
		b.ReportMetric(float64(r.lost), "lost-jobs")
		b.ReportMetric(float64(r.twice), "twice-jobs")
		b.ReportMetric(r.perWaiting(), "deliveries/waiting-job")
	}
}

// calendarForward is one job received on done.<tenant>.
type calendarForward struct {
	seq             int // publish order
	at, slot, sent  time.Time
	deferrals       int
	slotted, misfit bool // misfit: a slot that is not a minute's start
}

// calendarReport is one run of the calendar-window workload.
type calendarReport struct {
	start, lastPublish            time.Time
	published, forwarded, twice   int
	waiting, lost                 int
	slotted                       int               // forwards with a Throttler-Slot header
	waited, immediate             int               // admitted in a later minute than published; in the same
	byAdmission, byForward, redis map[time.Time]int // jobs per minute start
	fullMinutes, offMinutes       int               // minutes after the first and before the last; those not at 100 by admission or by Redis
	// early: forwarded before the start of their slot's minute; misfit:
	// slots more than 1 s from a minute's start; outOfOrder: jobs admitted
	// in an earlier minute than a job published before them.
	early, misfit, outOfOrder int
	slotOff                   []time.Duration // a header's slot less its minute's start
	lateSlot                  []time.Duration // forward less the slot's minute's start
	deferrals                 map[int]int     // Throttler-Deferrals of the forwards
	delivered, moved          float64         // the workers' counters, summed
}

// perWaiting is the deliveries per job that waited: the workers'
// deliveries less one for each job run in the minute of its publish (at
// its first delivery), over the jobs that waited.
func (r calendarReport) perWaiting() float64 {
	if r.waited == 0 {
		return 0
	}
	return (r.delivered - float64(r.immediate)) / float64(r.waited)
}

// runCalendarProcesses runs the workload once on servers of its own.
func runCalendarProcesses(tb testing.TB, bins binaries) calendarReport {
	tb.Helper()
	natsURL := startNATSProcess(tb, bins.natsServer)
	rs := testenv.StartRedis(tb)
	nc, err := nats.Connect(natsURL)
	must(tb, err, "connect")
	defer nc.Close()
	js, err := jetstream.New(nc)
	must(tb, err, "jetstream")

	var (
		mu       sync.Mutex
		forwards []calendarForward
	)
	sub, err := nc.Subscribe("done.*", func(m *nats.Msg) {
		f := calendarForward{at: time.Now(), seq: -1}
		if n, err := strconv.Atoi(m.Header.Get("Seq")); err == nil {
			f.seq = n
		}
		if ns, err := strconv.ParseInt(m.Header.Get("Sent"), 10, 64); err == nil {
			f.sent = time.Unix(0, ns)
		}
		if us, err := strconv.ParseInt(m.Header.Get(header.Slot), 10, 64); err == nil && us > 0 {
			f.slot, f.slotted = time.UnixMicro(us), true
		}
		f.deferrals, _ = strconv.Atoi(m.Header.Get(header.Deferrals))
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
		"THROTTLER_DEFAULT_LIMIT":    calendarSpec,
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

	// Redis's own counts: the window's hash, read every 50 ms; a window's
	// field lives until a call after the window's end drops it, so a
	// window still taking jobs at its end (the first) may lose its last
	// few counts to the sampling.
	rdb := rs.Client(tb)
	key := cfg.KeyPrefix + ":{acme}:c:m@UTC"
	counted := map[time.Time]int{}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var sampling sync.WaitGroup
	sampling.Go(func() {
		for sampleCtx.Err() == nil {
			for field, v := range rdb.HGetAll(sampleCtx, key).Val() {
				us, err1 := strconv.ParseInt(field, 10, 64)
				n, err2 := strconv.Atoi(v)
				if w := time.UnixMicro(us).UTC(); err1 == nil && err2 == nil && n > counted[w] {
					counted[w] = n
				}
			}
			select {
			case <-sampleCtx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	})

	// 300 a minute: one job every 200 ms.
	const tick = time.Minute / calendarOffered
	r := calendarReport{start: time.Now()}
	for k := range int(calendarPublish / tick) {
		m := nats.NewMsg("jobs.acme")
		m.Header.Set("Seq", strconv.Itoa(k))
		m.Header.Set("Sent", strconv.FormatInt(time.Now().UnixNano(), 10))
		_, err := js.PublishMsgAsync(m)
		must(tb, err, "publish")
		r.published++
		time.Sleep(time.Until(r.start.Add(time.Duration(k+1) * tick)))
	}
	r.lastPublish = time.Now()
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		tb.Fatalf("publish acks did not come")
	}
	// Watch until every job has run (or the drain's deadline), then a
	// second more for any forwarded twice.
	deadline := r.lastPublish.Add(calendarDrain)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(forwards)
		mu.Unlock()
		if n >= r.published {
			break
		}
		time.Sleep(time.Second)
	}
	time.Sleep(time.Second)
	stopSampling()
	sampling.Wait()

	for _, addr := range addrs {
		m, err := scrape(addr)
		must(tb, err, "metrics")
		r.delivered += m[`throttler_delivered_total{tenant="acme"}`]
		r.moved += m[`throttler_moved_total{tenant="acme"}`]
	}
	stopWorkers()
	r.waiting = pendingJobs(tb, js, cfg)
	mu.Lock()
	defer mu.Unlock()
	r.redis = counted
	r.measure(forwards)
	return r
}

// measure fills r from the forwards received.
func (r *calendarReport) measure(forwards []calendarForward) {
	r.byAdmission, r.byForward, r.deferrals = map[time.Time]int{}, map[time.Time]int{}, map[int]int{}
	seen := map[int]bool{}
	var runs []calendarForward
	for _, f := range forwards {
		if seen[f.seq] {
			r.twice++
			continue
		}
		seen[f.seq] = true
		admitted := f.at
		if f.slotted {
			// The header's slot is the worker's clock plus the wait from
			// Redis TIME: its window's start within a few ms.
			admitted = f.slot.Round(time.Minute)
			r.slotted++
			r.slotOff = append(r.slotOff, f.slot.Sub(admitted))
			r.lateSlot = append(r.lateSlot, f.at.Sub(admitted))
			if f.at.Before(admitted) {
				r.early++
			}
			if d := f.slot.Sub(admitted); d > time.Second || d < -time.Second {
				r.misfit++
			}
		}
		if admitted.Truncate(time.Minute).After(f.sent.Truncate(time.Minute)) {
			r.waited++
		} else {
			r.immediate++
		}
		r.byAdmission[admitted.UTC().Truncate(time.Minute)]++
		r.byForward[f.at.UTC().Truncate(time.Minute)]++
		r.deferrals[f.deferrals]++
		f.slot = admitted
		runs = append(runs, f)
	}
	r.forwarded = len(runs)
	r.lost = r.published - r.forwarded - r.waiting
	// In publish order, a job admitted in an earlier minute than one
	// published before it overtook that job.
	slices.SortFunc(runs, func(a, b calendarForward) int { return a.seq - b.seq })
	var latest time.Time
	for _, f := range runs {
		m := f.slot.Truncate(time.Minute)
		if m.Before(latest) {
			r.outOfOrder++
		}
		if m.After(latest) {
			latest = m
		}
	}
	minutes := r.minutes()
	for i, m := range minutes {
		if i == 0 || i == len(minutes)-1 {
			continue
		}
		r.fullMinutes++
		if r.byAdmission[m] != calendarN || r.redis[m] != calendarN {
			r.offMinutes++
		}
	}
}

// minutes are the minute starts from the first publish's to the last
// job's admission, in order.
func (r calendarReport) minutes() []time.Time {
	var last time.Time
	for m := range r.byAdmission {
		if m.After(last) {
			last = m
		}
	}
	var out []time.Time
	for m := r.start.UTC().Truncate(time.Minute); !m.After(last); m = m.Add(time.Minute) {
		out = append(out, m)
	}
	return out
}

// log reports every figure of r.
func (r calendarReport) log(tb testing.TB) {
	tb.Helper()
	tb.Logf("%s, offered %d/m for %s from %s (last publish %s): published %d, forwarded %d (twice %d), waiting at the end %d, lost %d",
		calendarSpec, calendarOffered, calendarPublish, r.start.UTC().Format("15:04:05.000"), r.lastPublish.UTC().Format("15:04:05.000"),
		r.published, r.forwarded, r.twice, r.waiting, r.lost)
	// One line for the minutes: go test shows a benchmark's first 10
	// lines of log without -v.
	line := ""
	minutes := r.minutes()
	for i, m := range minutes {
		what := ""
		switch i {
		case 0:
			what = fmt.Sprintf(" (first, from %s)", r.start.UTC().Format("15:04:05"))
		case len(minutes) - 1:
			what = " (last)"
		}
		line += fmt.Sprintf("; %s%s %d/%d/%d", m.Format("15:04"), what, r.byAdmission[m], r.byForward[m], r.redis[m])
	}
	tb.Logf("run per calendar minute (target %d) by admission / by forward / counted in Redis%s", calendarN, line)
	tb.Logf("full minutes %d, not at %d by admission or in Redis: %d", r.fullMinutes, calendarN, r.offMinutes)
	tb.Logf("jobs that waited for a later minute %d (from a slot %d), run in the minute of their publish %d; forwarded before their slot's minute %d, slots over 1 s from a minute's start %d, admitted before a job published earlier %d",
		r.waited, r.slotted, r.immediate, r.early, r.misfit, r.outOfOrder)
	tb.Logf("forward less its slot's minute start: %s; the header's slot less that start: %s",
		spread(slices.Clone(r.lateSlot)), spread(slices.Clone(r.slotOff)))
	tb.Logf("deliveries %.0f, moved %.0f: %.3f a job that waited (target 2); Throttler-Deferrals of the forwards: %v",
		r.delivered, r.moved, r.perWaiting(), r.deferrals)
}

// check fails tb on every figure that missed its target.
func (r calendarReport) check(tb testing.TB) {
	tb.Helper()
	if r.lost != 0 || r.twice != 0 || r.waiting != 0 {
		tb.Errorf("lost %d, run twice %d, still waiting %d: want 0, 0, 0", r.lost, r.twice, r.waiting)
	}
	if r.offMinutes != 0 || r.fullMinutes < 3 {
		tb.Errorf("%d of %d full minutes not at %d", r.offMinutes, r.fullMinutes, calendarN)
	}
	if r.early != 0 || r.misfit != 0 {
		tb.Errorf("%d jobs ran before their slot's minute, %d slots over 1 s from a minute's start", r.early, r.misfit)
	}
	if w := r.perWaiting(); w < 1.99 || w > 2.01 {
		tb.Errorf("%.3f deliveries a job that waited, want 2", w)
	}
}

// startThrottlerProcesses starts n throttler binaries with vars, each
// serving /metrics on a free port, waits for their metrics and returns
// the addresses and a function that stops them (SIGTERM, then waits);
// the stderr of each is logged if tb failed.
func startThrottlerProcesses(tb testing.TB, ctx context.Context, bin string, vars map[string]string, n int) (addrs []string, stop func()) {
	tb.Helper()
	var workers []*exec.Cmd
	for range n {
		addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(tb))
		addrs = append(addrs, addr)
		own := map[string]string{"THROTTLER_METRICS_ADDR": addr}
		for k, v := range vars {
			own[k] = v
		}
		cmd, _, stderr := throttlerCmd(ctx, bin, own)
		must(tb, cmd.Start(), "start throttler")
		workers = append(workers, cmd)
		tb.Cleanup(func() {
			if tb.Failed() {
				tb.Logf("worker stderr:\n%s", stderr.String())
			}
		})
		testenv.Eventually(tb, 10*time.Second, "worker metrics", func() bool { _, err := scrape(addr); return err == nil })
	}
	stop = func() {
		for _, w := range workers {
			_ = w.Process.Signal(syscall.SIGTERM)
		}
		for _, w := range workers {
			_ = w.Wait()
		}
		workers = nil
	}
	return addrs, stop
}

// The calendar benchmark's measures on forwards made up at fixed times:
// each job in its admission's minute, a duplicate, a lost job, a job
// forwarded before its slot's minute, a slot off a minute's start and
// jobs admitted ahead of one published before them.
func TestCalendarMeasure(t *testing.T) {
	at := func(sec float64) time.Time {
		return time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC).Add(time.Duration(sec * float64(time.Second)))
	}
	slotted := func(seq int, sent, slot, fwd float64) calendarForward {
		return calendarForward{seq: seq, sent: at(sent), slot: at(slot), at: at(fwd), slotted: true, deferrals: 1}
	}
	// The one full minute, 10:01, runs 2, not 100.
	r := calendarReport{start: at(30), published: 6, delivered: 8,
		redis: map[time.Time]int{at(0): 2, at(60): 2, at(120): 1}}
	r.measure([]calendarForward{
		{seq: 0, sent: at(31), at: at(31.01)},
		slotted(1, 40, 60.003, 60.010),
		slotted(2, 41, 119.998, 119.999), // before its minute, 10:02
		slotted(1, 40, 60.003, 60.020),   // run twice
		{seq: 3, sent: at(42), at: at(42.5)},
		slotted(4, 43, 70, 70.1), // 10 s after 10:01 starts
	})
	got := fmt.Sprint(r.forwarded, r.twice, r.lost, r.waited, r.immediate, r.slotted, r.early, r.misfit, r.outOfOrder, r.fullMinutes, r.offMinutes)
	if want := fmt.Sprint(5, 1, 1, 3, 2, 3, 1, 1, 2, 1, 1); got != want {
		t.Fatalf("forwarded, twice, lost, waited, immediate, slotted, early, misfit, out of order, full minutes, off: %s, want %s", got, want)
	}
	if a := r.byAdmission; a[at(0)] != 2 || a[at(60)] != 2 || a[at(120)] != 1 || r.perWaiting() != 2 {
		t.Fatalf("by admission %v, %.3f deliveries a job that waited; want 2, 2, 1 and 2", a, r.perWaiting())
	}
}

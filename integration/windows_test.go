package integration

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/internal/testenv"
)

// BenchmarkRateWindows runs the three-tenant accuracy workload (tenants
// of 20/s, 50/s and 200/s, each published at 3× its limit for 10 s, two
// workers) with MaxAckPending 1,000 and 20,000, under THROTTLER_DEFER auto
// and nak, and reports for each tenant its worst 250 ms window: the most
// jobs admitted in any 250 ms less what the limit allows in 250 ms plus
// its burst (excess-jobs), and the longest stretch without an admission
// while it had jobs waiting (stall-ms). NOISY_VARIANTS picks variants by
// name (auto-1000, nak-20000, …).
//
//	go test -run '^$' -bench RateWindows -benchtime 1x -timeout 30m ./integration/
func BenchmarkRateWindows(b *testing.B) {
	benchRateWindows(b, nil)
}

// BenchmarkRateWindowsProcesses is BenchmarkRateWindows with every part a
// process of its own, as an outside check runs it: a nats-server built from
// the module, the machine's redis-server and two throttler binaries
// forwarding to done.<tenant>, where the benchmark sees each job arrive.
//
//	go test -run '^$' -bench RateWindowsProcesses -benchtime 1x -timeout 30m ./integration/
func BenchmarkRateWindowsProcesses(b *testing.B) {
	benchRateWindows(b, &binaries{throttler: buildThrottler(b), natsServer: buildNATSServer(b)})
}

// binaries are the programs a benchmark runs as processes.
type binaries struct{ throttler, natsServer string }

// benchRateWindows runs the variants of BenchmarkRateWindows, in process
// or, with bins, as processes.
func benchRateWindows(b *testing.B, bins *binaries) {
	for _, v := range []struct {
		mode string
		map_ int
	}{{"auto", 1000}, {"auto", 20000}, {"nak", 1000}, {"nak", 20000}} {
		name := fmt.Sprintf("%s-%d", v.mode, v.map_)
		if !benchVariant(name) {
			continue
		}
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				for _, w := range runRateWindows(b, v.mode, v.map_, bins) {
					b.Logf("%s: %d in the busiest 250 ms (%d over rate and burst), longest stall %s",
						w.tenant, w.most, w.excess, w.stall.Round(time.Millisecond))
					b.ReportMetric(float64(w.excess), w.tenant+"-excess-jobs")
					b.ReportMetric(float64(w.stall.Milliseconds()), w.tenant+"-stall-ms")
					b.Logf("%s: worst stretch of any length: %d jobs in %s, %+.1f over rate and burst, %+.1f over rate+5%% and burst; moved jobs late p50 %s p99 %s max %s, %d of %d over 250 ms",
						w.tenant, w.stretch.jobs, w.stretch.length.Round(time.Millisecond), w.stretch.excess, w.stretch.over5,
						w.late.p50.Round(time.Millisecond), w.late.p99.Round(time.Millisecond), w.late.max.Round(time.Millisecond), w.late.over250ms, w.late.n)
					b.Logf("%s: the worst stretch began %s after the first publish; its jobs by how they came: %v; the longest stall ended %s after it",
						w.tenant, w.stretchAt.Round(time.Millisecond), w.kinds, w.stallAt.Round(time.Millisecond))
					b.ReportMetric(w.stretch.excess, w.tenant+"-stretch-excess-jobs")
					b.ReportMetric(w.stretch.over5, w.tenant+"-over-rate+5%-jobs")
				}
			}
		})
	}
}

// windowTenants are the tenants of the accuracy workload.
var windowTenants = []struct {
	name        string
	rate, burst int
}{{"small", 20, 5}, {"medium", 50, 5}, {"large", 200, 10}}

// rateWindow is one tenant's worst 250 ms window.
type rateWindow struct {
	tenant string
	most   int           // jobs admitted in the busiest 250 ms
	excess int           // most, less rate × 250 ms and the burst
	stall  time.Duration // longest gap between admissions before the last publish
	// stallEnd is when that gap ended.
	stallEnd time.Time
	// stretch is the worst stretch of any length (see stretchOf).
	stretch stretch
	// late is how late moved jobs ran after their slot (in process only).
	late lateness
	// kinds counts the jobs of the worst stretch by how they came (in
	// process only): fresh (first delivery), naked (redelivered after a
	// NAK), moved (a copy); stretchAt is when it began, from the first
	// publish.
	kinds              map[string]int
	stretchAt, stallAt time.Duration
}

// jobKind is when a job ran and how it came.
type jobKind struct {
	at   time.Time
	kind string
}

// runRateWindows runs the workload once, on servers of its own (as
// processes with bins), and returns each tenant's worst window.
func runRateWindows(tb testing.TB, mode string, maxAckPending int, bins *binaries) []rateWindow {
	tb.Helper()
	var natsURL string
	if bins != nil {
		natsURL = startNATSProcess(tb, bins.natsServer)
	} else {
		natsURL = testenv.StartNATS(tb, "").URL()
	}
	rs := testenv.StartRedis(tb)
	nc, err := nats.Connect(natsURL)
	must(tb, err, "connect")
	defer nc.Close()
	js, err := jetstream.New(nc)
	must(tb, err, "jetstream")
	limits := ""
	for i, tn := range windowTenants {
		if i > 0 {
			limits += ","
		}
		limits += fmt.Sprintf("%s=%d/s:%d", tn.name, tn.rate, tn.burst)
	}
	vars := map[string]string{
		"NATS_URL":                   natsURL,
		"REDIS_URL":                  rs.URL(),
		"THROTTLER_TENANT_LIMITS":    limits,
		"THROTTLER_MAX_ACK_PENDING":  strconv.Itoa(maxAckPending),
		"THROTTLER_DEFER":            mode,
		"THROTTLER_SHUTDOWN_TIMEOUT": "5s",
		"THROTTLER_LOG_LEVEL":        "error",
	}
	cfg, err := app.LoadSettingsFrom(vars)
	must(tb, err, "config")

	var mu sync.Mutex
	admitted := map[string][]time.Time{}
	late := map[string][]time.Duration{}
	kinds := map[string][]jobKind{}
	admit := func(tenant string) {
		mu.Lock()
		admitted[tenant] = append(admitted[tenant], time.Now())
		mu.Unlock()
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	if bins != nil {
		// Forwarded jobs, seen as they arrive on done.<tenant>.
		sub, err := nc.Subscribe("done.*", func(m *nats.Msg) { admit(strings.TrimPrefix(m.Subject, "done.")) })
		must(tb, err, "subscribe")
		must(tb, sub.SetPendingLimits(-1, -1), "pending limits")
		for range 2 {
			cmd, _, _ := throttlerCmd(ctx, bins.throttler, vars)
			must(tb, cmd.Start(), "start throttler")
			wg.Go(func() { _ = cmd.Wait() })
		}
	} else {
		handle := func(_ context.Context, job consumer.Job) error {
			admit(job.Tenant)
			k := jobKind{at: time.Now(), kind: "fresh"}
			switch {
			case job.Header.Get(header.Slot) != "":
				k.kind = "moved"
			case job.Delivered > 1:
				k.kind = "naked"
			}
			mu.Lock()
			kinds[job.Tenant] = append(kinds[job.Tenant], k)
			mu.Unlock()
			if us, err := strconv.ParseInt(job.Header.Get(header.Slot), 10, 64); err == nil {
				mu.Lock()
				late[job.Tenant] = append(late[job.Tenant], time.Since(time.UnixMicro(us)))
				mu.Unlock()
			}
			return nil
		}
		log := slog.New(slog.NewTextHandler(logSink(), &slog.HandlerOptions{Level: slog.LevelError}))
		for range 2 {
			wnc, err := nats.Connect(natsURL)
			must(tb, err, "connect")
			defer wnc.Close()
			rdb := rs.Client(tb)
			wg.Go(func() {
				if err := app.Run(ctx, cfg, app.Options{NATS: wnc, Redis: rdb, Handler: handle, Logger: log}); err != nil {
					tb.Errorf("worker: %v", err)
				}
			})
		}
	}
	testenv.Eventually(tb, 10*time.Second, "the workers' consumer", func() bool {
		_, err := js.Consumer(context.Background(), cfg.Stream, cfg.Consumer)
		return err == nil
	})

	// Each tenant at 3× its limit for 10 s, in 100 ms ticks.
	published := map[string]int{}
	const ticks = 100
	start := time.Now()
	for tick := 0; tick < ticks; tick++ {
		for _, tn := range windowTenants {
			for range tn.rate * 3 / 10 {
				_, err := js.PublishMsgAsync(&nats.Msg{Subject: "jobs." + tn.name, Data: []byte("job")})
				must(tb, err, "publish")
				published[tn.name]++
			}
		}
		time.Sleep(time.Until(start.Add(time.Duration(tick+1) * 100 * time.Millisecond))) // publishing pace
	}
	lastPublish := time.Now()
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		tb.Fatalf("publish acks did not come")
	}
	// Until every tenant has run 20 s of its jobs: enough windows after the
	// publishing to see bursts of jobs coming back.
	testenv.Eventually(tb, 90*time.Second, "20 s of every tenant's jobs", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, tn := range windowTenants {
			if len(admitted[tn.name]) < min(published[tn.name], tn.rate*20) {
				return false
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	var out []rateWindow
	for _, tn := range windowTenants {
		w := windowsOf(tn.name, admitted[tn.name], tn.rate, tn.burst, lastPublish)
		w.late = latenessOf(late[tn.name])
		w.kinds = map[string]int{}
		for _, k := range kinds[tn.name] {
			if !k.at.Before(w.stretch.from) && !k.at.After(w.stretch.from.Add(w.stretch.length)) {
				w.kinds[k.kind]++
			}
		}
		if len(admitted[tn.name]) > 0 {
			w.stretchAt, w.stallAt = w.stretch.from.Sub(start), w.stallEnd.Sub(start)
		}
		out = append(out, w)
	}
	return out
}

// windowsOf computes a tenant's worst 250 ms window from the times its
// jobs were admitted, for a limit of rate a second with burst; gaps count
// as stalls only before lastPublish, while the tenant surely had jobs
// waiting.
func windowsOf(tenant string, at []time.Time, rate, burst int, lastPublish time.Time) rateWindow {
	w := rateWindow{tenant: tenant}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	const span = 250 * time.Millisecond
	lo := 0
	for hi := range at {
		for at[hi].Sub(at[lo]) >= span {
			lo++
		}
		w.most = max(w.most, hi-lo+1)
		if hi > 0 && at[hi].Before(lastPublish) && at[hi].Sub(at[hi-1]) > w.stall {
			w.stall, w.stallEnd = at[hi].Sub(at[hi-1]), at[hi]
		}
	}
	w.excess = w.most - rate/4 - burst
	w.stretch = stretchOf(at, rate, burst)
	return w
}

// stretch is a tenant's worst stretch of any length: the jobs admitted
// from one job's time to another's, against what the limit allows over
// that length.
type stretch struct {
	// excess is the most, over every stretch, of its jobs less burst and
	// rate × its length.
	excess float64
	// jobs, from and length are the stretch that sets excess.
	jobs   int
	from   time.Time
	length time.Duration
	// over5 is the most, over every stretch, of its jobs less burst and
	// 1.05 × rate × its length: the target is that it never exceeds 0.
	over5 float64
}

// stretchOf finds the worst stretch of at (sorted) for a limit of rate a
// second with burst: for each job j, the best start i <= j is the one with
// the largest rate × t_i − i, kept as it goes, so it takes one pass.
func stretchOf(at []time.Time, rate, burst int) stretch {
	var w stretch
	if len(at) == 0 {
		return w
	}
	w.excess, w.over5 = math.Inf(-1), math.Inf(-1)
	t0 := at[0]
	sec := func(t time.Time) float64 { return t.Sub(t0).Seconds() }
	r, r5 := float64(rate), 1.05*float64(rate)
	best, best5 := math.Inf(-1), math.Inf(-1) // max over i <= j of r·t_i − i
	bestI := 0
	for j, t := range at {
		if v := r*sec(t) - float64(j); v > best {
			best, bestI = v, j
		}
		best5 = max(best5, r5*sec(t)-float64(j))
		// jobs(i..j) − burst − r·(t_j − t_i) = (j+1) − burst − r·t_j + (r·t_i − i)
		if e := float64(j+1-burst) - r*sec(t) + best; e > w.excess {
			w.excess, w.jobs, w.from, w.length = e, j-bestI+1, at[bestI], t.Sub(at[bestI])
		}
		w.over5 = max(w.over5, float64(j+1-burst)-r5*sec(t)+best5)
	}
	return w
}

// lateness sums up how late moved jobs ran after their slot.
type lateness struct {
	n             int
	p50, p99, max time.Duration
	over250ms     int
}

// latenessOf sums up the delays d.
func latenessOf(d []time.Duration) lateness {
	if len(d) == 0 {
		return lateness{}
	}
	slices.Sort(d)
	l := lateness{n: len(d), p50: d[len(d)/2], p99: d[len(d)*99/100], max: d[len(d)-1]}
	for _, x := range d {
		if x > 250*time.Millisecond {
			l.over250ms++
		}
	}
	return l
}

func TestWindowsOf(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var at []time.Time
	// 10 jobs 100 ms apart, then 30 within 100 ms, then a 2 s gap.
	for i := range 10 {
		at = append(at, t0.Add(time.Duration(i)*100*time.Millisecond))
	}
	for i := range 30 {
		at = append(at, t0.Add(time.Second+time.Duration(i)*3*time.Millisecond))
	}
	at = append(at, t0.Add(3200*time.Millisecond))
	w := windowsOf("x", at, 20, 5, t0.Add(10*time.Second))
	if w.most != 31 || w.excess != 31-5-5 || w.stall != 3200*time.Millisecond-1087*time.Millisecond {
		t.Fatalf("windowsOf = %+v", w)
	}
}

func TestStretchOf(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var at []time.Time
	// 10/s for 2 s, then 30 jobs within 1 s (20 over 10/s), then 10/s.
	for i := range 20 {
		at = append(at, t0.Add(time.Duration(i)*100*time.Millisecond))
	}
	for i := range 30 {
		at = append(at, t0.Add(2*time.Second+time.Duration(i)*time.Second/30))
	}
	for i := range 10 {
		at = append(at, t0.Add(3*time.Second+time.Duration(i)*100*time.Millisecond))
	}
	w := stretchOf(at, 10, 2)
	// Worst: the 30 jobs and the next one, 31 jobs over 1 s (2 s to 3 s):
	// 31 − 2 − 10 = 19, and 31 − 2 − 10.5 = 18.5 over rate+5%. (The whole
	// 0–3 s, 51 jobs, is 19 too, found first: any of the two will do.)
	if w.excess != 19 || w.over5 != 18.5 {
		t.Fatalf("stretchOf = %+v, want excess 19, over5 18.5", w)
	}
	if w := stretchOf(at[:20], 10, 2); w.excess > -1+1e-9 || w.over5 > 0 {
		t.Fatalf("steady 10/s: %+v, want no stretch over rate and burst", w)
	}
}

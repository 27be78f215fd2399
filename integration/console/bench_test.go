package console

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/testenv"
)

// tenThousand is how many tenants the benchmark's fleet view holds.
const tenThousand = 10_000

// BenchmarkConsoleTenThousandTenants opens the tenants page of a worker
// (a process of the binary, with real NATS and Redis) that holds 10,000
// tenants, each with a job waiting, in headless Chromium, and reports:
//
//   - first-render-ms: from opening the page to the first page of tenants
//     drawn, the fleet view gathered from the workers then (nothing
//     cached);
//   - refresh-p50-ms, refresh-p90-ms, refresh-max-ms: each refresh of the open page, its
//     request and its drawing, over 20 refreshes;
//   - api-p50-ms, api-max-ms: the same request from Go, 20 times: the
//     server's share of a refresh;
//   - cpu-closed-pct, cpu-open-pct: the worker process's CPU, in percent
//     of one core, over windows with no page open and with the page open,
//     alternated in the same run; cpu-open-delta-pct is the difference.
//
// Run it with: scripts/test.sh ./integration/console/ -run '^$' -bench TenThousand -benchtime 1x
func BenchmarkConsoleTenThousandTenants(b *testing.B) {
	bin := buildThrottler(b)
	n := testenv.StartNATS(b, "")
	r := testenv.StartRedis(b)
	nc := n.Connect(b)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(16384))
	if err != nil {
		b.Fatal(err)
	}
	start := func() (url string, pid int) {
		addr := testenv.FreeAddr(b)
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(),
			"NATS_URL="+n.URL(), "REDIS_URL="+r.URL(),
			"THROTTLER_DEFAULT_LIMIT=1/h:1", // one job runs, the other waits an hour: every tenant stays in the view
			"THROTTLER_ADMIN_ADDR="+addr, "THROTTLER_ADMIN_TOKEN="+token,
			"THROTTLER_METRICS_TENANTS=20000", "THROTTLER_LOG_LEVEL=warn",
		)
		cmd.Stderr = logSink()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return "http://" + addr, cmd.Process.Pid
	}
	url, _ := start()
	f := &fleet{t: nil, nc: nc, js: js}
	testenv.Eventually(b, 30*time.Second, "the worker's console answers", func() bool {
		return f.get(url, "/api/v1/fleet", nil) == 200
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range tenThousand {
		for range 2 {
			if _, err := js.PublishAsync(fmt.Sprintf("jobs.t%05d", i), []byte("x")); err != nil {
				b.Fatal(err)
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		b.Fatal("publishes not acked")
	}
	testenv.Eventually(b, 2*time.Minute, "10,000 tenants in the fleet view", func() bool {
		var page struct{ Tenants int }
		return f.get(url, "/api/v1/tenants?limit=1", &page) == 200 && page.Tenants >= tenThousand
	})

	for range b.N {
		// A worker of its own for the page: its console has gathered no
		// fleet view yet, so the first render waits for one.
		pageURL, pid := start()
		testenv.Eventually(b, 30*time.Second, "the page's worker answers", func() bool {
			return f.get(pageURL, "/api/v1/openapi.json", nil) == 200
		})
		br := browser(b, "Bearer "+token)
		do(b, br, 30*time.Second, "opening the tenants page",
			chromedp.Navigate(pageURL+"/#/tenants"),
			waitJS(`window.throttlerConsole.timings.tenants.refreshMs.length >= 20`))
		first := eval[float64](b, br, `window.throttlerConsole.timings.tenants.firstRenderMs`)
		refreshes := eval[[]float64](b, br, `window.throttlerConsole.timings.tenants.refreshMs`)
		if got := text(b, br, "#page-info"); !strings.HasSuffix(got, "of "+strconv.Itoa(tenThousand)) {
			b.Fatalf("the page says %q, want 10,000 tenants", got)
		}
		slices.Sort(refreshes)
		b.ReportMetric(first, "first-render-ms")
		b.ReportMetric(refreshes[len(refreshes)/2], "refresh-p50-ms")
		b.ReportMetric(refreshes[len(refreshes)*9/10], "refresh-p90-ms")
		b.ReportMetric(refreshes[len(refreshes)-1], "refresh-max-ms")

		// The same request from Go, without the browser: the server's
		// share of a refresh.
		var api []float64
		for range 20 {
			start := time.Now()
			if st := f.get(pageURL, "/api/v1/tenants?sort=waiting&order=desc&offset=0&limit=50", nil); st != 200 {
				b.Fatalf("GET /api/v1/tenants: %d", st)
			}
			api = append(api, float64(time.Since(start).Microseconds())/1000)
			time.Sleep(250 * time.Millisecond) // spread over the fleet view's refreshes
		}
		slices.Sort(api)
		b.ReportMetric(api[len(api)/2], "api-p50-ms")
		b.ReportMetric(api[len(api)-1], "api-max-ms")

		// The worker's CPU with and without the page, alternated.
		const window = 8 * time.Second
		var closed, open time.Duration
		for range 2 {
			do(b, br, 10*time.Second, "closing the page", chromedp.Navigate("about:blank"))
			closed += cpuOver(b, pid, window)
			do(b, br, 10*time.Second, "opening the page", chromedp.Navigate(pageURL+"/#/tenants"),
				waitJS(`document.querySelector('#tenants tbody tr[data-tenant]') !== null`))
			open += cpuOver(b, pid, window)
		}
		pct := func(d time.Duration) float64 { return 100 * d.Seconds() / (2 * window).Seconds() }
		b.ReportMetric(pct(closed), "cpu-closed-pct")
		b.ReportMetric(pct(open), "cpu-open-pct")
		b.ReportMetric(pct(open)-pct(closed), "cpu-open-delta-pct")
	}
}

// cpuOver returns the CPU time process pid uses over the next d.
func cpuOver(tb testing.TB, pid int, d time.Duration) time.Duration {
	tb.Helper()
	before := processCPU(tb, pid)
	time.Sleep(d) // a measuring window, not a wait for something to happen
	return processCPU(tb, pid) - before
}

// processCPU returns the user and system CPU time of process pid, from
// /proc (in clock ticks of 10ms).
func processCPU(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatalf("reading the worker's CPU: %v", err)
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	fields := strings.Fields(rest)
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			tb.Fatal(err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// buildThrottler builds cmd/throttler into a temporary directory.
func buildThrottler(tb testing.TB) string {
	tb.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		tb.Fatal(err)
	}
	bin := filepath.Join(tb.TempDir(), "throttler")
	build := exec.Command("go", "build", "-o", bin, "./cmd/throttler")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("go build ./cmd/throttler: %v\n%s", err, out)
	}
	return bin
}

package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

// liveTenants are the tenants of the live test's traffic, each made to
// exercise what a panel or a rule shows.
const (
	tenantFast    = "fast"    // runs at once, its requests taking about 100 ms
	tenantSlow    = "slow"    // 1/m:1: one job runs, the rest are moved into schedules
	tenantCapped  = "capped"  // running:1 and a request that hangs: one runs, the rest are parked
	tenantHeld    = "held"    // its first requests answered 429: held, then run
	tenantFailing = "failing" // answered 500: failed, retried, dead-lettered
	tenantPaced   = "paced"   // running:1 and 50 ms requests: its parked jobs run one by one
)

// destination is the HTTP server the workers send jobs to, answering per
// tenant as liveTenants say.
type destination struct {
	srv     *httptest.Server
	release chan struct{} // closed to end the capped tenant's hanging requests
	held    atomic.Int64  // the held tenant's requests so far
}

func newDestination(t testing.TB) *destination {
	d := &destination{release: make(chan struct{})}
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch strings.TrimPrefix(r.URL.Path, "/") {
		case tenantFast:
			time.Sleep(100 * time.Millisecond)
		case tenantPaced:
			time.Sleep(50 * time.Millisecond)
		case tenantCapped:
			select {
			case <-d.release:
			case <-r.Context().Done():
			}
		case tenantHeld:
			if d.held.Add(1) <= 3 {
				w.Header().Set("Retry-After", "2")
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
		case tenantFailing:
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(d.srv.Close)
	return d
}

// liveFleet is two workers, their servers and a Prometheus scraping them.
type liveFleet struct {
	cfg     *app.Settings
	js      jetstream.JetStream
	limiter *throttle.Limiter
	prom    string // Prometheus' base URL
	workers []string
}

// startLiveFleet starts NATS, Redis, the destination, two workers with
// the ConfigMap's settings (and the tenants' limits) and a real
// Prometheus scraping them every second and evaluating alerts.yaml. The
// workers take part in the census of waiting jobs every censusEvery (0:
// the default).
func startLiveFleet(t testing.TB, censusEvery time.Duration) *liveFleet {
	t.Helper()
	prometheusBin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus not in PATH (scripts/test.sh installs Debian's prometheus package): %v", err)
	}
	n := testenv.StartNATS(t, "")
	r := testenv.StartRedis(t)
	dest := newDestination(t)
	f := &liveFleet{}
	for i := range 2 {
		addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
		f.workers = append(f.workers, addr)
		vars := maps.Clone(loadManifests(t).configMap.Data)
		maps.Copy(vars, map[string]string{
			"NATS_URL":                   n.URL(),
			"REDIS_URL":                  r.URL(),
			"THROTTLER_METRICS_ADDR":     addr,
			"THROTTLER_SHUTDOWN_TIMEOUT": "5s",
			"THROTTLER_HANDLER":          "http",
			"THROTTLER_HTTP_URL":         dest.srv.URL + "/{tenant}",
			"THROTTLER_HTTP_TIMEOUT":     "2m",
			"THROTTLER_TENANT_LIMITS":    tenantSlow + "=1/m:1," + tenantCapped + "=100/s+running:1," + tenantPaced + "=100/s+running:1",
			"THROTTLER_MAX_FAILURES":     "2",
			// Prometheus scrapes every second here.
			"THROTTLER_METRICS_FIRST_HOLD": "2s",
		})
		cfg, err := app.LoadSettingsFrom(vars)
		if err != nil {
			t.Fatalf("settings: %v", err)
		}
		f.cfg = cfg
		rdb, err := app.NewRedis(cfg.Config, 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rdb.Close() })
		if i == 0 {
			if f.limiter, err = throttle.New(rdb, throttle.Options{Policies: throttle.Rules{Default: throttle.Policy{Running: 1}}, Prefix: cfg.KeyPrefix}); err != nil {
				t.Fatal(err)
			}
		}
		runWorker(t, cfg, app.Options{NATS: n.Connect(t), Redis: rdb, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			CensusEvery: censusEvery})
	}
	// Cleanups run last first: the hanging requests end before the
	// workers are stopped.
	t.Cleanup(func() { close(dest.release) })
	if f.js, err = jetstream.New(n.Connect(t)); err != nil {
		t.Fatal(err)
	}
	f.prom = startPrometheus(t, prometheusBin, f.workers)
	return f
}

// runWorker runs app.Run until the test ends.
func runWorker(t testing.TB, cfg *app.Settings, opts app.Options) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, cfg, opts) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("worker: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("a worker did not stop within 30 s")
		}
	})
}

// startPrometheus runs prometheus on a free port with a configuration
// scraping targets every second as job "throttler" and evaluating
// alerts.yaml every second; it returns its base URL once ready.
func startPrometheus(t testing.TB, bin string, targets []string) string {
	t.Helper()
	dir := t.TempDir()
	rules, err := filepath.Abs(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = strconv.Quote(tg)
	}
	conf := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: throttler
    static_configs:
      - targets: [%s]
`, rules, strings.Join(quoted, ", "))
	confFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(confFile, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	var logs bytes.Buffer
	cmd := exec.Command(bin, "--config.file="+confFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting prometheus: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus' log:\n%s", logs.String())
		}
	})
	base := "http://" + addr
	testenv.Eventually(t, 30*time.Second, "prometheus to be ready", func() bool {
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return base
}

// promResult is a query's result in Prometheus' HTTP API.
type promResult struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	} `json:"data"`
}

// query evaluates expr now; it fails t if Prometheus refuses it.
func (f *liveFleet) query(t testing.TB, expr string) promResult {
	t.Helper()
	resp, err := http.Get(f.prom + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		t.Fatalf("query %s: %v", expr, err)
	}
	defer resp.Body.Close()
	var res promResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		t.Fatalf("query %s: %v", expr, err)
	}
	if res.Status != "success" {
		t.Fatalf("query %s: %s", expr, res.Error)
	}
	return res
}

// scalar returns the value of a query's one series, or -1.
func (f *liveFleet) scalar(t testing.TB, expr string) float64 {
	t.Helper()
	res := f.query(t, expr)
	if len(res.Data.Result) != 1 {
		return -1
	}
	s, _ := res.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return -1
	}
	return v
}

// publish publishes n jobs of tenant, with header hdr.
func (f *liveFleet) publish(t testing.TB, tenant string, n int, hdr nats.Header) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range n {
		if _, err := f.js.PublishMsg(ctx, &nats.Msg{Subject: "jobs." + tenant, Header: hdr, Data: []byte("x")}); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
}

// publishEvery publishes a job of tenant every interval until the
// function it returns is called, which returns once it stopped.
func (f *liveFleet) publishEvery(t testing.TB, tenant string, every time.Duration) (stop func()) {
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := f.js.Publish(ctx, "jobs."+tenant, []byte("x"))
				cancel()
				if err != nil {
					t.Errorf("publish: %v", err)
					return
				}
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

package deploy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/internal/testenv"
)

// notTheWorkers are the metric names the rules and the dashboard may use
// that no worker exports, each with why it is allowed.
var notTheWorkers = map[string]string{
	// Prometheus records up for every scrape: 0 when the worker does not
	// answer, which no metric of the worker's can say.
	"up": "Prometheus' own, per scrape target",
}

// TestEveryMetricUsedIsExported: every metric name an alert rule or a
// dashboard panel selects is one a running worker serves on /metrics
// (histograms by their _bucket, _sum and _count series), but those of
// notTheWorkers. The worker runs in process with the ConfigMap's settings
// against a NATS and a redis-server of the test's own, on free ports, and
// is scraped once it has admitted, deferred and dead-lettered jobs, so
// that every per-tenant counter and the consumer's gauges are there.
func TestEveryMetricUsedIsExported(t *testing.T) {
	t.Parallel()
	queries := append(ruleQueries(t), dashboardQueries(t)...)
	exported := scrapeWorker(t)

	for _, q := range queries {
		for _, name := range metricNames(t, q) {
			if _, ok := notTheWorkers[name]; ok {
				continue
			}
			if !servedBy(exported, name) {
				t.Errorf("%s uses %s, which the worker does not export", q.where, name)
			}
		}
	}
	if t.Failed() {
		t.Logf("the worker exports: %v", slices.Sorted(maps.Keys(exported)))
	}
	// The gauges the rules and dashboard compare read what they say.
	if v := gauge(exported, "throttler_ready"); v != 1 {
		t.Errorf("throttler_ready %v on a worker that ran the jobs, want 1", v)
	}
	if v, want := gauge(exported, "throttler_max_ack_pending"), loadManifests(t).configMap.Data["THROTTLER_MAX_ACK_PENDING"]; fmt.Sprint(v) != want {
		t.Errorf("throttler_max_ack_pending %v, want the ConfigMap's THROTTLER_MAX_ACK_PENDING %s", v, want)
	}
}

// servedBy reports whether a selector of name finds series among the
// families exported: the family itself, or a histogram's or summary's
// _bucket, _sum or _count series.
func servedBy(exported map[string]*dto.MetricFamily, name string) bool {
	if _, ok := exported[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		switch f := exported[base]; {
		case f == nil:
		case f.GetType() == dto.MetricType_HISTOGRAM:
			return true
		case f.GetType() == dto.MetricType_SUMMARY && suffix != "_bucket":
			return true
		}
	}
	return false
}

// scrapeWorker runs a worker with the ConfigMap's settings, gives it jobs
// that are admitted, deferred and dead-lettered, and returns its
// /metrics, parsed by Prometheus' text parser.
func scrapeWorker(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	n := testenv.StartNATS(t, "")
	r := testenv.StartRedis(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))

	vars := maps.Clone(loadManifests(t).configMap.Data)
	maps.Copy(vars, map[string]string{
		"NATS_URL":                   n.URL(),
		"REDIS_URL":                  r.URL(),
		"THROTTLER_METRICS_ADDR":     addr,
		"THROTTLER_SHUTDOWN_TIMEOUT": "5s",
		// One job a second for slow, so that two of its three are
		// deferred.
		"THROTTLER_TENANT_LIMITS": "slow=1/s:1",
	})
	cfg, err := app.LoadSettingsFrom(vars)
	if err != nil {
		t.Fatalf("settings: %v", err)
	}
	rdb, err := app.NewRedis(cfg.Config, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, cfg, app.Options{NATS: n.Connect(t), Redis: rdb, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("worker: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("the worker did not stop within 30 s")
		}
	})

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	testenv.Eventually(t, 20*time.Second, "the worker to be ready", func() bool {
		code, _ := get("/readyz")
		return code == http.StatusOK
	})

	js, err := jetstream.New(n.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	publish := func(subject string, hdr nats.Header) {
		t.Helper()
		pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer pcancel()
		if _, err := js.PublishMsg(pctx, &nats.Msg{Subject: subject, Header: hdr, Data: []byte("x")}); err != nil {
			t.Fatalf("publish %s: %v", subject, err)
		}
	}
	for range 3 {
		publish("jobs.acme", nil)
		publish("jobs.slow", nil)
	}
	publish("jobs.acme", nats.Header{"Job-Cost": []string{"abc"}}) // dead-lettered: not a cost

	var families map[string]*dto.MetricFamily
	testenv.Eventually(t, 30*time.Second, "the worker to count the jobs and read its consumer", func() bool {
		code, body := get("/metrics")
		if code != http.StatusOK {
			return false
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		families, err = p.TextToMetricFamilies(strings.NewReader(body))
		if err != nil {
			t.Fatalf("parsing /metrics: %v", err)
		}
		return counter(families, "throttler_completed_total", "slow") == 3 &&
			counter(families, "throttler_completed_total", "acme") == 3 &&
			counter(families, "throttler_deferred_total", "slow") >= 2 &&
			counter(families, "throttler_dead_lettered_total", "acme") == 1 &&
			families["throttler_ack_pending"] != nil && families["throttler_consumer_pending"] != nil &&
			families["throttler_max_ack_pending"] != nil
	})
	return families
}

// gauge returns the value of family's one series, or -1.
func gauge(families map[string]*dto.MetricFamily, family string) float64 {
	if ms := families[family].GetMetric(); len(ms) == 1 {
		return ms[0].GetGauge().GetValue()
	}
	return -1
}

// counter returns the value of family's series for tenant, or -1.
func counter(families map[string]*dto.MetricFamily, family, tenant string) float64 {
	for _, m := range families[family].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "tenant" && l.GetValue() == tenant {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

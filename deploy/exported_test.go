package deploy

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// notTheWorkers are the metric names the rules and the dashboard may use
// that no worker exports, each with why it is allowed.
var notTheWorkers = map[string]string{
	// Prometheus records up for every scrape: 0 when the worker does not
	// answer, which no metric of the worker's can say.
	"up": "Prometheus' own, per scrape target",
}

// checkExported fails t unless every metric name an alert rule or a
// dashboard panel selects is one the worker serves in exported (its
// /metrics, parsed; histograms by their _bucket, _sum and _count series),
// but those of notTheWorkers; and the gauges the rules and dashboard
// compare read what they say. TestPrometheusLive calls it with a worker
// that ran its traffic.
func checkExported(t *testing.T, exported map[string]*dto.MetricFamily) {
	t.Helper()
	queries := append(ruleQueries(t), dashboardQueries(t)...)
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
	if v := gauge(exported, "throttler_ready"); v != 1 {
		t.Errorf("throttler_ready %v on a worker that ran the jobs, want 1", v)
	}
	if v, want := gauge(exported, "throttler_max_ack_pending"), loadManifests(t).configMap.Data["THROTTLER_MAX_ACK_PENDING"]; fmt.Sprint(v) != want {
		t.Errorf("throttler_max_ack_pending %v, want the ConfigMap's THROTTLER_MAX_ACK_PENDING %s", v, want)
	}
}

// parseMetrics parses a /metrics text with Prometheus' text parser.
func parseMetrics(t testing.TB, body []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return families
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

// gauge returns the value of family's one series, or -1.
func gauge(families map[string]*dto.MetricFamily, family string) float64 {
	if ms := families[family].GetMetric(); len(ms) == 1 {
		return ms[0].GetGauge().GetValue()
	}
	return -1
}

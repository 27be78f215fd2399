package app

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics is one worker's Prometheus registry: its own, not the global
// default, so that several workers in one process (the demo, the tests)
// each serve their own. It holds the Go runtime's and the process's
// collectors and the worker's histograms from the start; the per-tenant
// counters join once the worker is built (watch).
type metrics struct {
	reg        *prometheus.Registry
	histograms *histograms
	// tenantDetail exports every per-tenant counter with a tenant label
	// (THROTTLER_METRICS_TENANT_DETAIL).
	tenantDetail bool
	// now is the clock new tenant series are held at 0 by; nil is
	// time.Now (tests set their own).
	now func() time.Time
	// warmUp is how long they are held
	// (THROTTLER_METRICS_FIRST_HOLD; 0: not at all).
	warmUp time.Duration
}

// newMetrics returns a registry with the Go, process and histogram
// collectors registered.
func newMetrics() (*metrics, error) {
	m := &metrics{reg: prometheus.NewRegistry(), histograms: newHistograms()}
	cs := append([]prometheus.Collector{
		buildInfo(ReadBuild()),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}, m.histograms.collectors()...)
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering metrics: %w", err)
		}
	}
	return m, nil
}

// watch adds the worker's per-tenant counters and gauges, read from src
// at each scrape.
func (m *metrics) watch(src statsSource) error {
	now := m.now
	if now == nil {
		now = time.Now
	}
	if err := m.reg.Register(newStatsCollector(src, m.tenantDetail, m.warmUp, now)); err != nil {
		return fmt.Errorf("registering the worker's counters: %w", err)
	}
	if src.levels != nil {
		if err := m.reg.Register(newLevelCollector(src.levels)); err != nil {
			return fmt.Errorf("registering the levels' counters: %w", err)
		}
	}
	return nil
}

// handler serves the registry in the format the scraper asks for.
func (m *metrics) handler(log *slog.Logger) http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog: promLogger{log},
		// A metric that fails is left out of the scrape; the rest are
		// served.
		ErrorHandling: promhttp.ContinueOnError,
	})
}

// promLogger writes promhttp's errors to the worker's log.
type promLogger struct{ log *slog.Logger }

// Println implements promhttp.Logger.
func (l promLogger) Println(v ...any) { l.log.Warn("serving /metrics", "err", fmt.Sprint(v...)) }

// buildInfo is the gauge throttler_build_info, 1 with the build's version,
// commit and Go version as labels: a dashboard tells which fleet runs what.
func buildInfo(b Build) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "throttler_build_info",
		Help: "1, labelled with the worker's version, VCS commit and Go version.",
	}, []string{"version", "commit", "goversion"})
	g.WithLabelValues(b.Version, b.Commit, b.GoVersion).Set(1)
	return g
}

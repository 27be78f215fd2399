package app

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttler/throttler/config"
	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/internal/httpserve"
)

// server is the worker's HTTP side on THROTTLER_METRICS_ADDR: /healthz,
// /readyz and /metrics. A nil *server (the address is empty) does
// nothing.
type server struct {
	metrics *metrics
	ready   *readiness
	stop    func()
}

// startServer serves /healthz, /readyz and /metrics on
// THROTTLER_METRICS_ADDR, or returns nil when it is empty. It serves from
// before the set-up, so that /healthz answers and /readyz says what is
// missing while the set-up waits for NATS; ctx is the worker's.
func startServer(ctx context.Context, cfg *Settings, opts Options, log *slog.Logger) (*server, error) {
	if cfg.MetricsAddr == "" {
		return nil, nil
	}
	m, err := newMetrics()
	if err != nil {
		return nil, err
	}
	m.tenantDetail = cfg.MetricsTenantDetail
	m.warmUp = cfg.MetricsWarmUp
	ready := newReadiness(ctx, opts.NATS, opts.Redis, cfg.OnRedisError == config.OnRedisErrorAllow)
	if err := m.reg.Register(ready.gauge()); err != nil {
		return nil, fmt.Errorf("registering the readiness gauge: %w", err)
	}
	// Bound now, as the admin address is: a worker that cannot serve its
	// probes would be restarted by them, for a reason its log would give
	// only in passing.
	ln, err := net.Listen("tcp", cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("metrics address %q (THROTTLER_METRICS_ADDR): %w", cfg.MetricsAddr, err)
	}
	return &server{metrics: m, ready: ready, stop: serveHTTP(ln, m, ready, log)}, nil
}

// observer is what the worker reports its timings to: the histograms, or
// nil without a server.
func (s *server) observer() consumer.Observer {
	if s == nil {
		return nil
	}
	return s.metrics.histograms
}

// running adds the worker's counters to /metrics and lets /readyz check
// the jobs consumer it is about to pull from.
func (s *server) running(w *consumer.Worker, ackPending *consumer.AckPending, jobs jetstream.Consumer, waiting *waitingCounter) error {
	if s == nil {
		return nil
	}
	src := statsSource{stats: w.Stats, pulled: w.Pulled, ackPending: ackPending.Count,
		consumerPending: ackPending.Pending, maxAckPending: ackPending.MaxAckPending, waiting: waiting.served,
		levels: w.Levels}
	if err := s.metrics.watch(src); err != nil {
		return err
	}
	s.ready.running(jobs)
	return nil
}

// register adds c to /metrics; without a server it does nothing.
func (s *server) register(c prometheus.Collector) error {
	if s == nil {
		return nil
	}
	if err := s.metrics.reg.Register(c); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	return nil
}

// readiness returns the worker's readiness, or nil without a server.
func (s *server) readiness() *readiness {
	if s == nil {
		return nil
	}
	return s.ready
}

// close stops serving.
func (s *server) close() {
	if s != nil {
		s.stop()
	}
}

// serveHTTP serves /healthz (liveness: the process serves), /readyz (see
// readiness) and /metrics on ln until stop is called.
func serveHTTP(ln net.Listener, m *metrics, ready http.Handler, log *slog.Logger) (stop func()) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) { fmt.Fprintln(rw, "ok") })
	mux.Handle("/readyz", ready)
	mux.Handle("/metrics", m.handler(log))
	return httpserve.Serve(&http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln, "metrics", log)
}

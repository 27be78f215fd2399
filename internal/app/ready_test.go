package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/internal/testenv"
)

// countingPinger counts the PINGs it passes on.
type countingPinger struct {
	pinger
	n atomic.Int64
}

func (p *countingPinger) Ping(ctx context.Context) *redis.StatusCmd {
	p.n.Add(1)
	return p.pinger.Ping(ctx)
}

// TestReadinessChecksAtMostOncePerInterval: a storm of probes within one
// interval costs Redis one PING; the probes and the throttler_ready gauge
// all get its verdict. Before the worker runs, /readyz says it is setting
// up.
func TestReadinessChecksAtMostOncePerInterval(t *testing.T) {
	t.Parallel()
	n := testenv.StartNATS(t, "")
	r := testenv.StartRedis(t)
	ping := &countingPinger{pinger: r.Client(t)}
	ready := newReadiness(context.Background(), n.Connect(t), ping, false)
	ready.every = time.Hour // one interval for the whole test

	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			rec := httptest.NewRecorder()
			ready.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
			if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "setting up") {
				t.Errorf("/readyz before the worker runs: %d %q, want 503 saying it is setting up", rec.Code, rec.Body)
			}
		})
	}
	wg.Wait()
	// The gauge reads the same verdict, without another check.
	if got := gaugeValue(t, ready.gauge()); got != 0 {
		t.Errorf("throttler_ready = %v before the worker runs, want 0", got)
	}
	if got := ping.n.Load(); got != 1 {
		t.Errorf("%d PINGs for 50 probes and a scrape in one interval, want 1", got)
	}
}

// TestReadinessStopping: once the worker's context is cancelled, /readyz
// answers 503 at once, whatever it found before.
func TestReadinessStopping(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	ready := newReadiness(ctx, nil, nil, false)
	cancel()
	rec := httptest.NewRecorder()
	ready.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "shutting down") {
		t.Errorf("/readyz while stopping: %d %q, want 503 saying it is shutting down", rec.Code, rec.Body)
	}
}

// gaugeValue gathers the one gauge c collects and returns its value.
func gaugeValue(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gathering one gauge: %v, %d families", err, len(mfs))
	}
	return mfs[0].GetMetric()[0].GetGauge().GetValue()
}

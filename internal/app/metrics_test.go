package app

import (
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/throttler/throttler/consumer"
)

// scrape serves m's /metrics once and returns the text.
func scrape(t *testing.T, m *metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.handler(slog.New(slog.DiscardHandler)).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("GET /metrics: %d\n%s", rec.Code, rec.Body)
	}
	body, err := io.ReadAll(rec.Body)
	if err != nil {
		t.Fatalf("read /metrics: %v", err)
	}
	return string(body)
}

// newTestMetrics returns metrics watching stats, with held jobs and an
// ack-pending count as given.
func newTestMetrics(t *testing.T, stats *consumer.Stats, held, ackPending int) *metrics {
	t.Helper()
	m, err := newMetrics()
	if err != nil {
		t.Fatalf("newMetrics: %v", err)
	}
	// The backlog and MaxAckPending are read with ack-pending: known
	// together or not at all.
	other := func(n int) func() int {
		return func() int {
			if ackPending < 0 {
				return -1
			}
			return n
		}
	}
	src := statsSource{stats: stats.Snapshot, held: func() int { return held }, ackPending: func() int { return ackPending },
		consumerPending: other(1234), maxAckPending: other(1000)}
	if err := m.watch(src); err != nil {
		t.Fatalf("watch: %v", err)
	}
	return m
}

// TestMetricsCapTenants: /metrics shows at most the cap of tenants plus
// consumer.OtherTenants in each series, as consumer.Stats counts them.
func TestMetricsCapTenants(t *testing.T) {
	t.Parallel()
	stats := consumer.NewStats(2)
	for i := range 5 {
		stats.Add(fmt.Sprintf("t%d", i), func(ts *consumer.TenantStats) { ts.Admitted++ })
	}
	body := scrape(t, newTestMetrics(t, stats, 0, -1))
	for _, line := range []string{
		`throttler_admitted_total{tenant="t0"} 1`,
		`throttler_admitted_total{tenant="t1"} 1`,
		`throttler_admitted_total{tenant="` + consumer.OtherTenants + `"} 3`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", line, body)
		}
	}
	if n := strings.Count(body, "throttler_admitted_total{"); n != 3 {
		t.Errorf("%d admitted series, want 3", n)
	}
}

// TestMetricsKeepTheirNames: every counter the hand-written /metrics
// served keeps its name, type, label and value; the gauges too (the
// ack-pending one only once read); and the Go and process collectors and
// the histograms are there.
func TestMetricsKeepTheirNames(t *testing.T) {
	t.Parallel()
	stats := consumer.NewStats(10)
	stats.Add("acme", func(s *consumer.TenantStats) {
		s.Delivered, s.Admitted, s.Deferred, s.Moved, s.Completed, s.Failed, s.DeadLettered = 1, 2, 3, 4, 5, 6, 7
		s.RedisErrors, s.AllowedOnRedisError, s.Duplicates, s.RedisCalls, s.FastLaned = 8, 9, 10, 11, 12
		s.DeadLettersCut, s.MovesTooLarge, s.ShadowLimited, s.BadLimits, s.DownstreamHolds = 13, 14, 15, 16, 17
		s.ShadowWait = 1500 * time.Millisecond
	})
	m := newTestMetrics(t, stats, 7, 42)
	m.histograms.ObserveDecision(2 * time.Millisecond)
	m.histograms.ObserveQueueWait(time.Second)
	m.histograms.ObserveHandler(3 * time.Millisecond)
	m.histograms.ObserveThrottleWait(4 * time.Second)
	body := scrape(t, m)

	counters := []string{"delivered", "admitted", "deferred", "moved", "completed", "failed", "dead_lettered",
		"redis_errors", "allowed_on_redis_error", "duplicates", "redis_calls", "fast_laned", "dead_letters_cut",
		"moves_too_large", "shadow_limited", "bad_limits", "downstream_holds"}
	var want []string
	for i, name := range counters {
		want = append(want, fmt.Sprintf("# TYPE throttler_%s_total counter", name),
			fmt.Sprintf(`throttler_%s_total{tenant="acme"} %d`, name, i+1))
	}
	want = append(want,
		"# TYPE throttler_shadow_wait_seconds_total counter",
		`throttler_shadow_wait_seconds_total{tenant="acme"} 1.5`,
		"# TYPE throttler_held_jobs gauge", "throttler_held_jobs 7",
		"# TYPE throttler_ack_pending gauge", "throttler_ack_pending 42",
		"# TYPE throttler_consumer_pending gauge", "throttler_consumer_pending 1234",
		"# TYPE throttler_max_ack_pending gauge", "throttler_max_ack_pending 1000",
		"# TYPE go_goroutines gauge",
		"# TYPE process_resident_memory_bytes gauge",
	)
	for _, h := range []string{"decision_duration", "queue_wait", "handler_duration", "throttle_wait"} {
		name := "throttler_" + h + "_seconds"
		want = append(want, "# TYPE "+name+" histogram", name+"_count 1", name+`_bucket{le="+Inf"} 1`)
	}
	for _, line := range want {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	for _, line := range strings.Split(body, "\n") {
		if strings.Contains(line, "_seconds_bucket{") && strings.Contains(line, "tenant=") {
			t.Errorf("a histogram has a tenant label: %s", line)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
}

// TestMetricsAckPendingUnread: before the consumer's info is first read,
// its gauges are left out rather than shown as 0.
func TestMetricsAckPendingUnread(t *testing.T) {
	t.Parallel()
	body := scrape(t, newTestMetrics(t, consumer.NewStats(10), 0, -1))
	for _, name := range []string{"throttler_ack_pending", "throttler_consumer_pending", "throttler_max_ack_pending"} {
		if strings.Contains(body, name) {
			t.Errorf("/metrics shows %s before it was read:\n%s", name, body)
		}
	}
	if !strings.Contains(body, "\nthrottler_held_jobs 0\n") {
		t.Errorf("/metrics lacks held jobs at 0:\n%s", body)
	}
}

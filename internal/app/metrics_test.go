package app

import (
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
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

// testClock is a clock the test moves.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// warmUp is the tests' THROTTLER_METRICS_FIRST_HOLD, its default.
const warmUp = time.Minute

// testMetrics is the bundle newTestMetrics returns.
type testMetrics struct {
	*metrics
	clock *testClock
	// waiting is what the census would serve; nil: no fresh count.
	mu      sync.Mutex
	waiting map[string]int64
}

// setWaiting sets the census' counts.
func (tm *testMetrics) setWaiting(w map[string]int64) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	tm.waiting = w
}

// newTestMetrics returns metrics watching stats, with held jobs and an
// ack-pending count as given, on a clock of the test's; detail is
// THROTTLER_METRICS_TENANT_DETAIL.
func newTestMetrics(t *testing.T, stats *consumer.Stats, held, ackPending int, detail bool) *testMetrics {
	t.Helper()
	m, err := newMetrics()
	if err != nil {
		t.Fatalf("newMetrics: %v", err)
	}
	tm := &testMetrics{metrics: m, clock: &testClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	m.tenantDetail = detail
	m.now = tm.clock.now
	m.warmUp = warmUp
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
	waiting := func() (map[string]int64, bool) {
		tm.mu.Lock()
		defer tm.mu.Unlock()
		return tm.waiting, tm.waiting != nil
	}
	src := statsSource{stats: stats.Snapshot, pulled: func() int { return held }, ackPending: func() int { return ackPending },
		consumerPending: other(1234), maxAckPending: other(1000), waiting: waiting}
	if err := m.watch(src); err != nil {
		t.Fatalf("watch: %v", err)
	}
	return tm
}

// requireLines fails t unless body has every line.
func requireLines(t *testing.T, body string, lines ...string) {
	t.Helper()
	for _, line := range lines {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
}

// TestMetricsCapTenants: /metrics shows at most the cap of tenants plus
// consumer.OtherTenants in each series, as consumer.Stats counts them.
func TestMetricsCapTenants(t *testing.T) {
	t.Parallel()
	stats := consumer.NewStats(2)
	for i := range 5 {
		stats.Add(fmt.Sprintf("t%d", i), func(ts *consumer.TenantStats) { ts.Admitted++ })
	}
	m := newTestMetrics(t, stats, 0, -1, false)
	scrape(t, m.metrics)
	m.clock.advance(warmUp)
	body := scrape(t, m.metrics)
	requireLines(t, body,
		`throttler_admitted_total{tenant="t0"} 1`,
		`throttler_admitted_total{tenant="t1"} 1`,
		`throttler_admitted_total{tenant="`+consumer.OtherTenants+`"} 3`)
	if n := strings.Count(body, "throttler_admitted_total{"); n != 3 {
		t.Errorf("%d admitted series, want 3", n)
	}
}

// TestMetricsFirstEventsCounted: a tenant's series appears with its first
// event, served at 0 until warmUp has passed, so that rate() and
// increase() count the first events (6 dead letters are 6, not 4); a
// counter the tenant never used has no series.
func TestMetricsFirstEventsCounted(t *testing.T) {
	t.Parallel()
	stats := consumer.NewStats(10)
	stats.Add("acme", func(s *consumer.TenantStats) { s.Admitted++ })
	m := newTestMetrics(t, stats, 0, -1, false)
	body := scrape(t, m.metrics)
	if strings.Contains(body, "throttler_dead_lettered_total{") {
		t.Errorf("a dead-letter series before any dead letter:\n%s", body)
	}
	stats.Add("acme", func(s *consumer.TenantStats) { s.DeadLettered += 6 })
	m.clock.advance(time.Second)
	requireLines(t, scrape(t, m.metrics), `throttler_dead_lettered_total{tenant="acme"} 0`)
	m.clock.advance(warmUp - time.Second)
	requireLines(t, scrape(t, m.metrics), `throttler_dead_lettered_total{tenant="acme"} 0`)
	m.clock.advance(time.Second)
	body = scrape(t, m.metrics)
	requireLines(t, body, `throttler_dead_lettered_total{tenant="acme"} 6`, `throttler_admitted_total{tenant="acme"} 1`)
	for _, unused := range []string{"failed", "completed", "parks", "downstream_holds", "deferred"} {
		if strings.Contains(body, "throttler_"+unused+"_total{") {
			t.Errorf("a series of %s, which acme never had", unused)
		}
	}
	if strings.Contains(body, "throttler_running{") {
		t.Errorf("a running series for a tenant that never ran under a cap:\n%s", body)
	}
}

// TestMetricsRunningOnceCapped: the running gauge of a tenant appears once
// it runs jobs under a cap, unheld, and stays (at 0) when they end.
func TestMetricsRunningOnceCapped(t *testing.T) {
	t.Parallel()
	stats := consumer.NewStats(10)
	stats.Add("capped", func(s *consumer.TenantStats) { s.Running = 2 })
	m := newTestMetrics(t, stats, 0, -1, false)
	requireLines(t, scrape(t, m.metrics), `throttler_running{tenant="capped"} 2`)
	stats.Add("capped", func(s *consumer.TenantStats) { s.Running = 0 })
	requireLines(t, scrape(t, m.metrics), `throttler_running{tenant="capped"} 0`)
}

// TestMetricsKeepTheirNames: the per-tenant counters keep their names,
// type and tenant label; the others are served as the worker's totals
// by default and per tenant with THROTTLER_METRICS_TENANT_DETAIL; the
// gauges too (the ack-pending one only once read); and the Go and process
// collectors and the histograms are there.
func TestMetricsKeepTheirNames(t *testing.T) {
	t.Parallel()
	for _, detail := range []bool{false, true} {
		t.Run(fmt.Sprintf("detail=%v", detail), func(t *testing.T) {
			t.Parallel()
			stats := consumer.NewStats(10)
			fill := func(s *consumer.TenantStats) {
				s.Admitted, s.Deferred, s.Completed, s.Failed, s.DeadLettered, s.DownstreamHolds, s.CapDeferred, s.Running = 1, 2, 3, 4, 5, 6, 7, 8
				s.Delivered, s.Moved, s.RedisErrors, s.AllowedOnRedisError, s.Duplicates, s.RedisCalls, s.FastLaned = 9, 10, 11, 12, 13, 14, 15
				s.DeadLettersCut, s.MovesTooLarge, s.ShadowLimited, s.BadLimits, s.Woken, s.LeasesLost, s.HeldBack = 16, 17, 18, 19, 20, 21, 22
				s.CreditsWaiting, s.Paused = 23, 24
				s.ShadowWait = 1500 * time.Millisecond
				s.SettledCharged, s.SettledRefunded = 25, 26
			}
			stats.Add("acme", fill)
			stats.Add("beta", fill)
			m := newTestMetrics(t, stats, 7, 42, detail)
			m.histograms.ObserveDecision(2 * time.Millisecond)
			m.histograms.ObserveQueueWait(time.Second)
			m.histograms.ObserveHandler(3 * time.Millisecond)
			m.histograms.ObserveThrottleWait(4 * time.Second)
			scrape(t, m.metrics)
			m.clock.advance(warmUp)
			body := scrape(t, m.metrics)

			perTenant := []string{"admitted", "deferred", "completed", "failed", "dead_lettered", "downstream_holds", "parks"}
			totals := []string{"delivered", "moved", "redis_errors", "allowed_on_redis_error", "duplicates", "redis_calls", "fast_laned",
				"dead_letters_cut", "moves_too_large", "shadow_limited", "bad_limits", "woken", "leases_lost", "held_back", "credit_waits", "paused"}
			var want []string
			for i, name := range perTenant {
				want = append(want, fmt.Sprintf("# TYPE throttler_%s_total counter", name),
					fmt.Sprintf(`throttler_%s_total{tenant="acme"} %d`, name, i+1))
			}
			want = append(want, "# TYPE throttler_running gauge", `throttler_running{tenant="acme"} 8`)
			for i, name := range totals {
				want = append(want, fmt.Sprintf("# TYPE throttler_%s_total counter", name))
				if detail {
					want = append(want, fmt.Sprintf(`throttler_%s_total{tenant="acme"} %d`, name, i+9))
				} else {
					want = append(want, fmt.Sprintf(`throttler_%s_total %d`, name, 2*(i+9)))
				}
			}
			if detail {
				want = append(want, `throttler_settled_cost_total{direction="charged",tenant="acme"} 25`,
					`throttler_settled_cost_total{direction="refunded",tenant="acme"} 26`)
			} else {
				want = append(want, `throttler_settled_cost_total{direction="charged"} 50`, `throttler_settled_cost_total{direction="refunded"} 52`)
			}
			if detail {
				want = append(want, `throttler_shadow_wait_seconds_total{tenant="acme"} 1.5`)
			} else {
				want = append(want, `throttler_shadow_wait_seconds_total 3`)
			}
			want = append(want,
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
			requireLines(t, body, want...)
			series := 0
			for _, line := range strings.Split(body, "\n") {
				if strings.Contains(line, `tenant="acme"`) {
					series++
				}
				if strings.Contains(line, "_seconds_bucket{") && strings.Contains(line, "tenant=") {
					t.Errorf("a histogram has a tenant label: %s", line)
				}
			}
			// docs/operations.md, "Metrics and cardinality".
			if wantSeries := map[bool]int{false: 8, true: 27}[detail]; series != wantSeries {
				t.Errorf("%d series of tenant acme, want %d", series, wantSeries)
			}
		})
	}
}

// TestMetricsAckPendingUnread: before the consumer's info is first read,
// its gauges are left out rather than shown as 0.
func TestMetricsAckPendingUnread(t *testing.T) {
	t.Parallel()
	body := scrape(t, newTestMetrics(t, consumer.NewStats(10), 0, -1, false).metrics)
	for _, name := range []string{"throttler_ack_pending", "throttler_consumer_pending", "throttler_max_ack_pending"} {
		if strings.Contains(body, name) {
			t.Errorf("/metrics shows %s before it was read:\n%s", name, body)
		}
	}
	if !strings.Contains(body, "\nthrottler_held_jobs 0\n") {
		t.Errorf("/metrics lacks held jobs at 0:\n%s", body)
	}
}

// TestMetricsWaitingJobs: the census' counts are served by kind while
// fresh, and left out (not served as 0) when there are none.
func TestMetricsWaitingJobs(t *testing.T) {
	t.Parallel()
	m := newTestMetrics(t, consumer.NewStats(10), 0, 5, false)
	if body := scrape(t, m.metrics); strings.Contains(body, "throttler_waiting_jobs{") {
		t.Errorf("waiting jobs served without a count:\n%s", body)
	}
	m.setWaiting(map[string]int64{waitingNak: 13, waitingScheduled: 3137, waitingParked: 1691})
	requireLines(t, scrape(t, m.metrics), "# TYPE throttler_waiting_jobs gauge",
		`throttler_waiting_jobs{kind="nak"} 13`, `throttler_waiting_jobs{kind="scheduled"} 3137`, `throttler_waiting_jobs{kind="parked"} 1691`)
}

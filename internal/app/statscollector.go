package app

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttler/throttler/consumer"
)

// statsSource is what statsCollector reads at each scrape.
type statsSource struct {
	// stats returns a snapshot of the per-tenant counters (consumer.Stats
	// caps their tenants, the rest counted as consumer.OtherTenants).
	stats func() map[string]consumer.TenantStats
	// held returns the jobs pulled and not yet acted on.
	held func() int
	// ackPending returns the jobs consumer's ack-pending count as last
	// read, or -1 before the first read; nil when nothing follows it.
	ackPending func() int
	// consumerPending and maxAckPending return the jobs consumer's
	// NumPending and MaxAckPending as last read, or -1 before the first
	// read; nil when nothing follows them.
	consumerPending, maxAckPending func() int
}

// tenantCounter is one per-tenant counter (or gauge) of
// consumer.TenantStats.
type tenantCounter struct {
	desc *prometheus.Desc
	get  func(consumer.TenantStats) float64
	vt   prometheus.ValueType
}

// statsCollector exposes the worker's per-tenant counters and its gauges,
// read from the worker's own counts at scrape time: the hot path keeps
// counting into consumer.Stats under one lock, and a scrape costs one
// snapshot. The tenants are those of the snapshot, so the cap on tenant
// series is consumer.Stats' (THROTTLER_METRICS_TENANTS, then "_other").
type statsCollector struct {
	src        statsSource
	counters   []tenantCounter
	held       *prometheus.Desc
	ackPending *prometheus.Desc
	// consumerPending is the backlog the alerts and KEDA watch;
	// maxAckPending is what ack-pending is held to, for the dashboard.
	consumerPending, maxAckPending *prometheus.Desc
}

// newStatsCollector returns a collector reading src.
func newStatsCollector(src statsSource) *statsCollector {
	counter := func(name, help string, get func(consumer.TenantStats) float64) tenantCounter {
		return tenantCounter{desc: prometheus.NewDesc("throttler_"+name, help, []string{"tenant"}, nil), get: get, vt: prometheus.CounterValue}
	}
	gauge := func(name, help string, get func(consumer.TenantStats) float64) tenantCounter {
		g := counter(name, help, get)
		g.vt = prometheus.GaugeValue
		return g
	}
	n := func(v int64) float64 { return float64(v) }
	return &statsCollector{
		src: src,
		counters: []tenantCounter{
			counter("delivered_total", "Deliveries received.", func(s consumer.TenantStats) float64 { return n(s.Delivered) }),
			counter("admitted_total", "Jobs admitted by the throttle.", func(s consumer.TenantStats) float64 { return n(s.Admitted) }),
			counter("deferred_total", "Throttle deferrals.", func(s consumer.TenantStats) float64 { return n(s.Deferred) }),
			counter("moved_total", "Deferrals that moved the job off the consumer.", func(s consumer.TenantStats) float64 { return n(s.Moved) }),
			counter("completed_total", "Jobs whose handler succeeded.", func(s consumer.TenantStats) float64 { return n(s.Completed) }),
			counter("failed_total", "Handler failures.", func(s consumer.TenantStats) float64 { return n(s.Failed) }),
			counter("dead_lettered_total", "Jobs sent to the dead-letter subject.", func(s consumer.TenantStats) float64 { return n(s.DeadLettered) }),
			counter("redis_errors_total", "Decisions that failed because of Redis.", func(s consumer.TenantStats) float64 { return n(s.RedisErrors) }),
			counter("allowed_on_redis_error_total", "Jobs admitted by policy while Redis failed.",
				func(s consumer.TenantStats) float64 { return n(s.AllowedOnRedisError) }),
			counter("duplicates_total", "Copies of moved jobs acked without running.", func(s consumer.TenantStats) float64 { return n(s.Duplicates) }),
			counter("redis_calls_total", "Throttle decisions asked of Redis.", func(s consumer.TenantStats) float64 { return n(s.RedisCalls) }),
			counter("fast_laned_total", "Jobs the fast lane took out of a backlog.", func(s consumer.TenantStats) float64 { return n(s.FastLaned) }),
			counter("dead_letters_cut_total", "Dead letters cut to fit the server's limits.",
				func(s consumer.TenantStats) float64 { return n(s.DeadLettersCut) }),
			counter("moves_too_large_total", "Deferrals NAK'd because the job's copy would be too large to move.",
				func(s consumer.TenantStats) float64 { return n(s.MovesTooLarge) }),
			counter("shadow_limited_total", "Jobs in shadow mode that enforcing would have deferred.",
				func(s consumer.TenantStats) float64 { return n(s.ShadowLimited) }),
			counter("bad_limits_total", "Values of the tenant's key in the limits bucket that were ignored as invalid.",
				func(s consumer.TenantStats) float64 { return n(s.BadLimits) }),
			counter("downstream_holds_total", "Jobs whose destination asked the worker to wait (HTTP 429, or 503 with Retry-After); each held its tenant back.",
				func(s consumer.TenantStats) float64 { return n(s.DownstreamHolds) }),
			counter("shadow_wait_seconds_total", "Waits enforcing would have imposed on jobs in shadow mode.",
				func(s consumer.TenantStats) float64 { return s.ShadowWait.Seconds() }),
			counter("cap_deferrals_total", "Jobs parked to wait for a lease of a running cap (running:N, THROTTLER_MAX_RUNNING).",
				func(s consumer.TenantStats) float64 { return n(s.CapDeferred) }),
			counter("woken_total", "Parked jobs this worker brought back when a lease freed for them.",
				func(s consumer.TenantStats) float64 { return n(s.Woken) }),
			counter("leases_lost_total", "Leases of running jobs found expired when renewed (the worker stalled past THROTTLER_LEASE_TTL).",
				func(s consumer.TenantStats) float64 { return n(s.LeasesLost) }),
			counter("held_back_total", "Admitted jobs deferred instead of started because their downstream had asked to wait since (a 429 heard by any worker).",
				func(s consumer.TenantStats) float64 { return n(s.HeldBack) }),
			gauge("running", "Jobs this worker runs, or holds for a handler slot, under a running cap.",
				func(s consumer.TenantStats) float64 { return n(s.Running) }),
		},
		held:       prometheus.NewDesc("throttler_held_jobs", "Jobs pulled and not yet decided or acted on.", nil, nil),
		ackPending: prometheus.NewDesc("throttler_ack_pending", "The jobs consumer's messages delivered and not yet acked, as last read.", nil, nil),
		consumerPending: prometheus.NewDesc("throttler_consumer_pending",
			"The jobs consumer's messages not yet delivered (its NumPending), as last read.", nil, nil),
		maxAckPending: prometheus.NewDesc("throttler_max_ack_pending", "The jobs consumer's MaxAckPending, as last read.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.counters {
		ch <- m.desc
	}
	ch <- c.held
	ch <- c.ackPending
	ch <- c.consumerPending
	ch <- c.maxAckPending
}

// Collect implements prometheus.Collector. A metric that cannot be built
// is reported to the scrape as invalid, never a panic.
func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	send := func(desc *prometheus.Desc, vt prometheus.ValueType, v float64, labels ...string) {
		m, err := prometheus.NewConstMetric(desc, vt, v, labels...)
		if err != nil {
			m = prometheus.NewInvalidMetric(desc, err)
		}
		ch <- m
	}
	snap := c.src.stats()
	for _, m := range c.counters {
		for tenant, s := range snap {
			send(m.desc, m.vt, m.get(s), tenant)
		}
	}
	send(c.held, prometheus.GaugeValue, float64(c.src.held()))
	// The consumer's gauges are left out until first read, as before: a 0
	// would read as an idle consumer.
	for _, g := range []struct {
		desc *prometheus.Desc
		read func() int
	}{{c.ackPending, c.src.ackPending}, {c.consumerPending, c.src.consumerPending}, {c.maxAckPending, c.src.maxAckPending}} {
		if g.read == nil {
			continue
		}
		if n := g.read(); n >= 0 {
			send(g.desc, prometheus.GaugeValue, float64(n))
		}
	}
}

package app

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttler/throttler/consumer"
)

// statsSource is what statsCollector reads at each scrape.
type statsSource struct {
	// stats returns a snapshot of the per-tenant counters (consumer.Stats
	// caps their tenants, the rest counted as consumer.OtherTenants).
	stats func() map[string]consumer.TenantStats
	// pulled returns the jobs pulled and not yet acted on.
	pulled func() int
	// ackPending returns the jobs consumer's ack-pending count as last
	// read, or -1 before the first read; nil when nothing follows it.
	ackPending func() int
	// consumerPending and maxAckPending return the jobs consumer's
	// NumPending and MaxAckPending as last read, or -1 before the first
	// read; nil when nothing follows them.
	consumerPending, maxAckPending func() int
	// waiting returns the fleet's waiting jobs by kind as last counted,
	// and false when there is no fresh count; nil when nothing counts.
	waiting func() (map[string]int64, bool)
	// levels returns what each shared level did; nil when nothing counts.
	levels func() map[string]consumer.LevelStats
}

// tenantCounter is one per-tenant counter (or gauge) of
// consumer.TenantStats.
type tenantCounter struct {
	name, help string
	get        func(consumer.TenantStats) float64
	vt         prometheus.ValueType
	// constLabels: labels of its own, fixed (a direction).
	constLabels prometheus.Labels
	// perTenant: exported with a tenant label by default; the others are
	// totals of the worker unless THROTTLER_METRICS_TENANT_DETAIL is set.
	perTenant bool
	// desc is the metric, with a tenant label or without.
	desc *prometheus.Desc
	// byTenant: desc has a tenant label.
	byTenant bool
}

// statsCollector exposes the worker's per-tenant counters and its gauges,
// read from the worker's own counts at scrape time: the hot path keeps
// counting into consumer.Stats under one lock, and a scrape costs one
// snapshot. The tenants are those of the snapshot, so the cap on tenant
// series is consumer.Stats' (THROTTLER_METRICS_TENANTS, then "_other").
//
// A tenant's series of a counter is served from the tenant's first event
// of that counter on, so that a counter a tenant never uses costs no
// series; the running gauge, once a tenant has run jobs under a cap.
// Counters kept as totals of the worker are always served. rate() and
// increase() count nothing of a series' first sample: a new series is
// served at 0 for warmUp (THROTTLER_METRICS_FIRST_HOLD, a minute by
// default) so that every Prometheus scraping at least that often stores
// a 0 first and counts the first events.
type statsCollector struct {
	src        statsSource
	now        func() time.Time
	warmUp     time.Duration // THROTTLER_METRICS_FIRST_HOLD
	counters   []tenantCounter
	held       *prometheus.Desc
	ackPending *prometheus.Desc
	// consumerPending is the jobs not yet taken in; maxAckPending is what
	// ack-pending is held to, for the dashboard.
	consumerPending, maxAckPending *prometheus.Desc
	waiting                        *prometheus.Desc

	mu sync.Mutex
	// shown: for each tenant, when each counter's series was first
	// served (zero: not yet); bounded like the snapshot's tenants.
	shown map[string][]time.Time
}

// newStatsCollector returns a collector reading src; detail exports every
// counter per tenant.
func newStatsCollector(src statsSource, detail bool, warmUp time.Duration, now func() time.Time) *statsCollector {
	counter := func(name, help string, perTenant bool, get func(consumer.TenantStats) float64) tenantCounter {
		return tenantCounter{name: "throttler_" + name, help: help, get: get, vt: prometheus.CounterValue, perTenant: perTenant}
	}
	n := func(v int64) float64 { return float64(v) }
	const perTenant, total = true, false
	// settled is one direction of throttler_settled_cost_total: a total
	// of the worker by default (two series per tenant would take a
	// tenant past the 8 series it may cost by default), per tenant with
	// THROTTLER_METRICS_TENANT_DETAIL.
	settled := func(direction, help string, get func(consumer.TenantStats) float64) tenantCounter {
		return tenantCounter{name: "throttler_settled_cost_total", get: get, vt: prometheus.CounterValue, perTenant: false,
			help: "Cost settled after jobs ran (a handler's reported cost, Throttler-Cost), by direction: " +
				"charged (as debt: jobs reported more than they were charged) or refunded (less).",
			constLabels: prometheus.Labels{"direction": direction}}
	}
	counters := []tenantCounter{
		counter("admitted_total", "Admissions: jobs the throttle let through. A job admitted again after a downstream hold, "+
			"or after a failed run, counts again; jobs that ran are completed_total and failed_total.",
			perTenant, func(s consumer.TenantStats) float64 { return n(s.Admitted) }),
		counter("deferred_total", "Throttle deferrals (a job deferred again counts again).", perTenant,
			func(s consumer.TenantStats) float64 { return n(s.Deferred) }),
		counter("completed_total", "Jobs whose handler succeeded.", perTenant, func(s consumer.TenantStats) float64 { return n(s.Completed) }),
		counter("failed_total", "Handler failures (runs that failed; a retried job counts each).", perTenant,
			func(s consumer.TenantStats) float64 { return n(s.Failed) }),
		counter("dead_lettered_total", "Jobs sent to the dead-letter subject.", perTenant, func(s consumer.TenantStats) float64 { return n(s.DeadLettered) }),
		counter("downstream_holds_total", "Jobs whose destination asked the worker to wait (HTTP 429, or 503 with Retry-After); each held its tenant back.",
			perTenant, func(s consumer.TenantStats) float64 { return n(s.DownstreamHolds) }),
		counter("parks_total", "Times a job was parked to wait for a lease of a running cap (running:N, THROTTLER_MAX_RUNNING); "+
			"a job parked again when it came back before its turn counts again. Jobs parked now: throttler_waiting_jobs{kind=\"parked\"}.",
			perTenant, func(s consumer.TenantStats) float64 { return n(s.CapDeferred) }),
		{name: "throttler_running", help: "Jobs this worker runs, or keeps waiting for a handler slot, under a running cap.",
			get: func(s consumer.TenantStats) float64 { return n(s.Running) }, vt: prometheus.GaugeValue, perTenant: perTenant},

		counter("delivered_total", "Deliveries received from NATS (a job kept in the worker for its slot and decided again there counts once).", total, func(s consumer.TenantStats) float64 { return n(s.Delivered) }),
		counter("moved_total", "Deferrals that moved the job off the consumer.", total, func(s consumer.TenantStats) float64 { return n(s.Moved) }),
		counter("redis_errors_total", "Decisions that failed because of Redis.", total, func(s consumer.TenantStats) float64 { return n(s.RedisErrors) }),
		counter("allowed_on_redis_error_total", "Jobs admitted by policy while Redis failed.", total,
			func(s consumer.TenantStats) float64 { return n(s.AllowedOnRedisError) }),
		counter("duplicates_total", "Copies of moved jobs acked without running.", total, func(s consumer.TenantStats) float64 { return n(s.Duplicates) }),
		counter("redis_calls_total", "Throttle decisions asked of Redis.", total, func(s consumer.TenantStats) float64 { return n(s.RedisCalls) }),
		counter("fast_laned_total", "Jobs the fast lane took out of a backlog.", total, func(s consumer.TenantStats) float64 { return n(s.FastLaned) }),
		counter("dead_letters_cut_total", "Dead letters cut to fit the server's limits.", total,
			func(s consumer.TenantStats) float64 { return n(s.DeadLettersCut) }),
		counter("moves_too_large_total", "Deferrals NAK'd because the job's copy would be too large to move.", total,
			func(s consumer.TenantStats) float64 { return n(s.MovesTooLarge) }),
		counter("shadow_limited_total", "Jobs in shadow mode that enforcing would have deferred.", total,
			func(s consumer.TenantStats) float64 { return n(s.ShadowLimited) }),
		counter("shadow_wait_seconds_total", "Waits enforcing would have imposed on jobs in shadow mode.", total,
			func(s consumer.TenantStats) float64 { return s.ShadowWait.Seconds() }),
		counter("bad_limits_total", "Values of a tenant's key in the limits bucket that were ignored as invalid.", total,
			func(s consumer.TenantStats) float64 { return n(s.BadLimits) }),
		counter("woken_total", "Parked jobs this worker brought back when a lease freed for them.", total,
			func(s consumer.TenantStats) float64 { return n(s.Woken) }),
		counter("leases_lost_total", "Leases of running jobs found expired when renewed (the worker stalled past THROTTLER_LEASE_TTL).", total,
			func(s consumer.TenantStats) float64 { return n(s.LeasesLost) }),
		counter("held_back_total", "Admitted jobs deferred instead of started because their downstream had asked to wait since (a 429 heard by any worker).",
			total, func(s consumer.TenantStats) float64 { return n(s.HeldBack) }),
		counter("credit_waits_total", "Times a job was parked because its tenant's credits could not cover it (credits); "+
			"a job parked again after a top-up that did not cover it counts again.", total,
			func(s consumer.TenantStats) float64 { return n(s.CreditsWaiting) }),
		// A total by default: the operator knows whom they paused (top,
		// inspect, pause list), and a tenant's series stay at most 8.
		counter("paused_total", "Jobs deferred, uncharged, because an operator paused their tenant (throttler pause).",
			total, func(s consumer.TenantStats) float64 { return n(s.Paused) }),
		settled("charged", "charged as debt: jobs reported more than they were charged", func(s consumer.TenantStats) float64 { return n(s.SettledCharged) }),
		settled("refunded", "given back: jobs reported less than they were charged", func(s consumer.TenantStats) float64 { return n(s.SettledRefunded) }),
	}
	for i := range counters {
		c := &counters[i]
		c.byTenant = c.perTenant || detail
		var labels []string
		if c.byTenant {
			labels = []string{"tenant"}
		}
		c.desc = prometheus.NewDesc(c.name, c.help, labels, c.constLabels)
	}
	return &statsCollector{
		src:        src,
		now:        now,
		warmUp:     warmUp,
		counters:   counters,
		shown:      map[string][]time.Time{},
		held:       prometheus.NewDesc("throttler_held_jobs", "Jobs pulled and not yet decided or acted on.", nil, nil),
		ackPending: prometheus.NewDesc("throttler_ack_pending", "The jobs consumer's messages delivered and not yet acked, as last read.", nil, nil),
		consumerPending: prometheus.NewDesc("throttler_consumer_pending",
			"The jobs consumer's messages not yet delivered (its NumPending), as last read: jobs not yet taken in.", nil, nil),
		maxAckPending: prometheus.NewDesc("throttler_max_ack_pending", "The jobs consumer's MaxAckPending, as last read.", nil, nil),
		waiting: prometheus.NewDesc("throttler_waiting_jobs",
			"Jobs of the whole fleet taken in and waiting to run, by kind: nak (NAK'd, due back on the consumer; an estimate), "+
				"scheduled (moved into schedules), parked (waiting for a lease of a running cap), queued (waiting for a turn under "+
				"the global or a group's limit), paused (of paused tenants) and held (of tenants whose downstream asked to wait). "+
				"The same on every worker: read it with max.",
			[]string{"kind"}, nil),
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
	ch <- c.waiting
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
	totals := make([]float64, len(c.counters))
	now := c.now()
	c.mu.Lock()
	for tenant, s := range snap {
		shown := c.shown[tenant]
		if shown == nil {
			shown = make([]time.Time, len(c.counters))
			c.shown[tenant] = shown
		}
		for i, m := range c.counters {
			v := m.get(s)
			if !m.byTenant {
				totals[i] += v
				continue
			}
			if shown[i].IsZero() {
				if v == 0 {
					continue // nothing to show yet: no series
				}
				shown[i] = now
			}
			if m.vt == prometheus.CounterValue && now.Sub(shown[i]) < c.warmUp {
				v = 0 // new: served at 0 first, for rate() to count from
			}
			send(m.desc, m.vt, v, tenant)
		}
	}
	c.mu.Unlock()
	for i, m := range c.counters {
		if !m.byTenant {
			send(m.desc, m.vt, totals[i])
		}
	}
	send(c.held, prometheus.GaugeValue, float64(c.src.pulled()))
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
	// The fleet's waiting jobs, when a fresh count was read.
	if c.src.waiting != nil {
		if counts, ok := c.src.waiting(); ok {
			for kind, n := range counts {
				send(c.waiting, prometheus.GaugeValue, float64(n), kind)
			}
		}
	}
}

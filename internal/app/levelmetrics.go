package app

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttler/throttler/consumer"
)

// levelCollector exposes what the shared levels (the global limit and
// the groups') did to the worker's jobs, by level: a label of its own,
// whose values are few (the global level and the groups with limits),
// never one more tenant label.
type levelCollector struct {
	levels   func() map[string]consumer.LevelStats
	deferred *prometheus.Desc
	shadow   *prometheus.Desc
}

// newLevelCollector returns a collector reading levels at each scrape.
func newLevelCollector(levels func() map[string]consumer.LevelStats) *levelCollector {
	return &levelCollector{
		levels: levels,
		deferred: prometheus.NewDesc("throttler_level_deferrals_total",
			"Jobs a limit above the tenant made wait, by level (_global, group.NAME) and kind: queued for a turn (parked until woken), or given a slot ahead.",
			[]string{"level", "kind"}, nil),
		shadow: prometheus.NewDesc("throttler_level_shadow_waits_total",
			"Jobs a limit above the tenant in shadow mode would have made wait, by level.",
			[]string{"level"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *levelCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.deferred
	ch <- c.shadow
}

// Collect implements prometheus.Collector.
func (c *levelCollector) Collect(ch chan<- prometheus.Metric) {
	for name, s := range c.levels() {
		ch <- prometheus.MustNewConstMetric(c.deferred, prometheus.CounterValue, float64(s.Queued), name, "queued")
		ch <- prometheus.MustNewConstMetric(c.deferred, prometheus.CounterValue, float64(s.Slotted), name, "slot")
		ch <- prometheus.MustNewConstMetric(c.shadow, prometheus.CounterValue, float64(s.ShadowWaited), name)
	}
}

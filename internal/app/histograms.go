package app

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// histograms records the worker's timings (it is its consumer.Observer) in
// Prometheus histograms, in seconds. None has a tenant label: a histogram
// costs a series per bucket, so per tenant it would multiply the series by
// the tenants, and the per-tenant counters already say who waits. An
// observation is a few atomic adds, cheap enough for the hot path.
type histograms struct {
	decision, queueWait, handler, throttleWait prometheus.Histogram
}

// newHistograms returns the worker's histograms, not yet registered.
func newHistograms() *histograms {
	return &histograms{
		decision: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "throttler_decision_duration_seconds",
			Help: "Round trip of one batch's decision in Redis, failed or not.",
			// A batch takes well under a millisecond on a near Redis and a
			// few on a busy or distant one; a failed call can take up to
			// THROTTLER_REDIS_TIMEOUT (2 s by default), which the top
			// buckets catch.
			Buckets: []float64{.00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "throttler_queue_wait_seconds",
			Help: "Time from a job's first publish to the start of its handler, deferrals included.",
			// From milliseconds (a tenant under its limit, no backlog) to
			// the reservation horizon (THROTTLER_MAX_DEFER, 10 m by
			// default) and an hour for backlogs and outages past it.
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600},
		}),
		handler: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "throttler_handler_duration_seconds",
			Help: "Run time of a job's handler.",
			// The forward handler is one acknowledged publish, about a
			// millisecond; handlers of one's own may run for minutes, kept
			// alive with InProgress.
			// 0.15 and 0.2 keep a p50 of requests of about 100 ms near
			// what it is.
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .15, .2, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
		throttleWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "throttler_throttle_wait_seconds",
			Help: "Time from first publish to the start of its handler of a job the throttle put off (deferred, parked or held back), to the end however often it was put off.",
			// From a fraction of a second (a token about to free) to the
			// reservation horizon (THROTTLER_MAX_DEFER, 10 m by default)
			// and past it: a job whose slot lies past the horizon is
			// deferred again, and its whole wait lands in the top buckets.
			// 5 s is THROTTLER_SCHEDULE_AFTER's default, where auto starts
			// moving jobs off the consumer instead of NAK'ing them.
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400},
		}),
	}
}

// collectors returns the histograms, to register.
func (h *histograms) collectors() []prometheus.Collector {
	return []prometheus.Collector{h.decision, h.queueWait, h.handler, h.throttleWait}
}

// ObserveDecision implements consumer.Observer.
func (h *histograms) ObserveDecision(d time.Duration) { h.decision.Observe(d.Seconds()) }

// ObserveQueueWait implements consumer.Observer.
func (h *histograms) ObserveQueueWait(d time.Duration) { h.queueWait.Observe(d.Seconds()) }

// ObserveHandler implements consumer.Observer.
func (h *histograms) ObserveHandler(d time.Duration) { h.handler.Observe(d.Seconds()) }

// ObserveThrottleWait implements consumer.Observer.
func (h *histograms) ObserveThrottleWait(d time.Duration) { h.throttleWait.Observe(d.Seconds()) }

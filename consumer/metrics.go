package consumer

import (
	"fmt"
	"net/http"
)

// MetricsHandler serves the worker's per-tenant counters in the Prometheus
// text format: a series per tenant, up to Config.StatsTenants of them, and
// one for OtherTenants past that.
func MetricsHandler(w *Worker) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "text/plain; version=0.0.4")
		snap := w.Stats()
		tenants := SortedTenants(snap)
		metrics := []struct {
			name, help string
			get        func(TenantStats) int64
		}{
			{"delivered", "Deliveries received.", func(s TenantStats) int64 { return s.Delivered }},
			{"admitted", "Jobs admitted by the throttle.", func(s TenantStats) int64 { return s.Admitted }},
			{"deferred", "Throttle deferrals.", func(s TenantStats) int64 { return s.Deferred }},
			{"moved", "Deferrals that moved the job off the consumer.", func(s TenantStats) int64 { return s.Moved }},
			{"completed", "Jobs whose handler succeeded.", func(s TenantStats) int64 { return s.Completed }},
			{"failed", "Handler failures.", func(s TenantStats) int64 { return s.Failed }},
			{"dead_lettered", "Jobs sent to the dead-letter subject.", func(s TenantStats) int64 { return s.DeadLettered }},
			{"redis_errors", "Decisions that failed because of Redis.", func(s TenantStats) int64 { return s.RedisErrors }},
			{"allowed_on_redis_error", "Jobs admitted by policy while Redis failed.", func(s TenantStats) int64 { return s.AllowedOnRedisError }},
			{"duplicates", "Copies of moved jobs acked without running.", func(s TenantStats) int64 { return s.Duplicates }},
			{"redis_calls", "Throttle decisions asked of Redis.", func(s TenantStats) int64 { return s.RedisCalls }},
			{"fast_laned", "Jobs the fast lane took out of a backlog.", func(s TenantStats) int64 { return s.FastLaned }},
			{"dead_letters_cut", "Dead letters cut to fit the server's limits.", func(s TenantStats) int64 { return s.DeadLettersCut }},
			{"moves_too_large", "Deferrals NAK'd because the job's copy would be too large to move.", func(s TenantStats) int64 { return s.MovesTooLarge }},
			{"shadow_limited", "Jobs in shadow mode that enforcing would have deferred.", func(s TenantStats) int64 { return s.ShadowLimited }},
			{"bad_limits", "Values of the tenant's key in the limits bucket that were ignored as invalid.", func(s TenantStats) int64 { return s.BadLimits }},
		}
		for _, m := range metrics {
			fmt.Fprintf(rw, "# HELP throttler_%s_total %s\n# TYPE throttler_%s_total counter\n", m.name, m.help, m.name)
			for _, t := range tenants {
				fmt.Fprintf(rw, "throttler_%s_total{tenant=%q} %d\n", m.name, t, m.get(snap[t]))
			}
		}
		fmt.Fprintf(rw, "# HELP throttler_shadow_wait_seconds_total Waits enforcing would have imposed on jobs in shadow mode.\n# TYPE throttler_shadow_wait_seconds_total counter\n")
		for _, t := range tenants {
			fmt.Fprintf(rw, "throttler_shadow_wait_seconds_total{tenant=%q} %g\n", t, snap[t].ShadowWait.Seconds())
		}
		fmt.Fprintf(rw, "# HELP throttler_held_jobs Jobs pulled and not yet decided or acted on.\n# TYPE throttler_held_jobs gauge\nthrottler_held_jobs %d\n", w.Held())
		if w.ackPending != nil && w.ackPending.Count() >= 0 {
			fmt.Fprintf(rw, "# HELP throttler_ack_pending The jobs consumer's messages delivered and not yet acked, as last read.\n# TYPE throttler_ack_pending gauge\nthrottler_ack_pending %d\n", w.ackPending.Count())
		}
	})
}

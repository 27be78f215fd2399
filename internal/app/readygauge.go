package app

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// gauge returns throttler_ready, 1 while /readyz would answer 200 and 0
// otherwise, so that alerts and dashboards see a worker that is up but not
// ready without kube-state-metrics. A scrape takes the same cached verdict
// as the probes, so it adds no checks beyond one a second.
func (r *readiness) gauge() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "throttler_ready",
		Help: "1 while the worker is ready (/readyz answers 200), else 0.",
	}, func() float64 {
		if len(r.verdict(context.Background()).problems) > 0 {
			return 0
		}
		return 1
	})
}

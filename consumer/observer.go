package consumer

import "time"

// Observer receives the worker's timings as they happen, for histograms
// (internal/app records them with Prometheus). Its methods are called on
// the hot path, from several goroutines at once: they must be cheap and
// safe for concurrent use, and must not block.
type Observer interface {
	// ObserveDecision receives how long one batch's decision took: the
	// round trip of one DecideBatch call, failed or not.
	ObserveDecision(d time.Duration)
	// ObserveQueueWait receives how long a job waited from its first
	// publish (Job.Published) to the start of its handler; deferrals
	// included.
	ObserveQueueWait(d time.Duration)
	// ObserveHandler receives how long a job's handler ran.
	ObserveHandler(d time.Duration)
	// ObserveThrottleWait receives how long a job that was put off
	// (deferred, parked or held back, once or many times) waited from its
	// first publish to the start of its handler.
	ObserveThrottleWait(d time.Duration)
}

// nopObserver is the Observer of a worker given none.
type nopObserver struct{}

func (nopObserver) ObserveDecision(time.Duration)     {}
func (nopObserver) ObserveQueueWait(time.Duration)    {}
func (nopObserver) ObserveHandler(time.Duration)      {}
func (nopObserver) ObserveThrottleWait(time.Duration) {}

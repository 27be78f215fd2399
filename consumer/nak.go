package consumer

import (
	"context"
	"time"
)

// NakDeferrer defers a job with NakWithDelay: JetStream redelivers it after
// the wait. The job keeps its place in the consumer's ack-pending set while
// it waits, so it counts against MaxAckPending.
type NakDeferrer struct{}

// Defer implements Deferrer.
func (NakDeferrer) Defer(_ context.Context, ds []Deferral) {
	for i := range ds {
		ds[i].Err = ds[i].Msg.NakWithDelay(nakDelay(ds[i].Wait))
	}
}

// nakDelay turns a throttle wait into a redelivery delay. The wait is already
// rounded up to the microsecond; one more millisecond absorbs clock reading
// jitter so the job does not come back a hair early and pay a second trip.
func nakDelay(wait time.Duration) time.Duration {
	if wait <= 0 {
		return 0
	}
	return wait + time.Millisecond
}

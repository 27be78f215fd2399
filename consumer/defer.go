package consumer

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Deferrer puts off a job the throttle has limited. It must settle msg
// (NAK it, or ACK it once the job is safely elsewhere) and never lose the job.
type Deferrer interface {
	// Defer puts off msg's job so that it comes back after wait.
	Defer(ctx context.Context, msg jetstream.Msg, job Job, wait time.Duration) error
}

// NakDeferrer defers a job with NakWithDelay: JetStream redelivers it after
// the wait. The job keeps its place in the consumer's ack-pending set while
// it waits, so it counts against MaxAckPending.
type NakDeferrer struct{}

// Defer implements Deferrer.
func (NakDeferrer) Defer(_ context.Context, msg jetstream.Msg, _ Job, wait time.Duration) error {
	return msg.NakWithDelay(nakDelay(wait))
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

package consumer

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Deferral is one limited job to put off.
type Deferral struct {
	// Msg is the delivered message. The Deferrer settles it.
	Msg jetstream.Msg
	// Job is the job Msg carries.
	Job Job
	// Wait is how long the job must wait: until its reserved slot.
	Wait time.Duration
	// Reason says why the job waits, for people reading a moved copy
	// (header.WaitReason): the limit that held it, or a handler failure.
	Reason string
	// Park says the job waits for a lease of a running cap, not for a
	// time: a Deferrer that moves jobs moves it on its own (never in a
	// bundle) to Schedules.Copy, where a Waker finds it in its turn; Wait
	// is how long it stays if never woken.
	Park bool
	// Paused says the job waits because an operator paused its tenant
	// (Pauser); Park is set too, so that it is moved on its own and a
	// resume can bring it back at once.
	Paused bool
	// Moved is set by the Deferrer when the job left the consumer.
	Moved bool
	// FiresAt, set by a Deferrer that moved the job, is when its copy
	// leaves the stream to come back: before its slot by the Deferrer's
	// lead, or sooner when its stay is capped. Zero: at its slot.
	FiresAt time.Time
	// NakedInstead is set by a Deferrer that meant to move the job but
	// NAK'd it with its wait: why the move could not be made (its copy
	// would be too large, or could not be stored). The job waits all the
	// same.
	NakedInstead error
	// Err is set by the Deferrer when settling failed. The job is not lost:
	// JetStream redelivers an unsettled message after AckWait.
	Err error
}

// Deferrer puts off jobs the throttle has limited, and the retries of jobs
// whose handler failed. It must settle every message (NAK it, or ACK it
// once the job is safely stored elsewhere) and never lose a job. The worker
// calls it from its deferring goroutine, with the jobs in the order their
// slots were reserved, and from handler goroutines for retries, one job at
// a time: it must be safe for concurrent use.
type Deferrer interface {
	// Defer puts off each job so that it comes back after its wait, and
	// records the outcome in its Deferral.
	Defer(ctx context.Context, ds []Deferral)
}

// clock returns now, or time.Now when now is nil.
func clock(now func() time.Time) func() time.Time {
	if now == nil {
		return time.Now
	}
	return now
}

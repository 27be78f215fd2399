package ops

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/subject"
	"github.com/throttler/throttler/tenant"
)

// Fleet names what the operations reach on the servers: the streams,
// consumers and subjects of one fleet of workers, as the workers'
// settings name them (internal/app.Settings.Fleet builds it).
type Fleet struct {
	// JetStream reaches the streams. Required.
	JetStream jetstream.JetStream
	// Stream is the jobs stream (THROTTLER_STREAM).
	Stream string
	// Consumer is the jobs consumer (THROTTLER_CONSUMER); the consumers of
	// fast copies and woken jobs are named after it.
	Consumer string
	// Subjects are the job subjects (THROTTLER_SUBJECTS).
	Subjects []string
	// Schedules names the subjects moved jobs wait on
	// (THROTTLER_SCHEDULE_SUBJECT).
	Schedules subject.Schedules
	// DLQ is the dead-letter subject template (THROTTLER_DLQ_SUBJECT).
	DLQ subject.Template
	// TenantFrom is where a job's tenant comes from (THROTTLER_TENANT_FROM).
	TenantFrom tenant.Source
	// CostHeader is the header holding a job's cost (THROTTLER_COST_HEADER):
	// a replayed job keeps it, whatever its name.
	CostHeader string
}

// FastConsumer is the consumer of the fast lane's copies.
func (f Fleet) FastConsumer() string { return f.Consumer + "_fast" }

// WokenConsumer is the consumer of jobs woken under running caps.
func (f Fleet) WokenConsumer() string { return f.Consumer + "_woken" }

// ErrBadInput marks an error in what the caller asked (an unknown dead
// letter, a bad tenant), as against a server's failure.
var ErrBadInput = errors.New("bad input")

// ErrNotFound marks a dead letter that does not exist; it matches
// ErrBadInput too.
var ErrNotFound = fmt.Errorf("%w: not found", ErrBadInput)

// dlqStream returns the stream that stores the dead letters, or nil when
// no stream binds the dead-letter subjects (no dead letter was ever
// stored).
func (f Fleet) dlqStream(ctx context.Context) (jetstream.Stream, error) {
	name, err := f.JetStream.StreamNameBySubject(ctx, f.DLQ.Pattern())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("finding the stream of %s: %w", f.DLQ.Pattern(), err)
	}
	s, err := f.JetStream.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	return s, nil
}

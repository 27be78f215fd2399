package streams

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ConsumerSpec describes the durable consumer the worker reads.
type ConsumerSpec struct {
	// Stream is the jobs stream.
	Stream string
	// Name is the durable name.
	Name string
	// FilterSubjects are the job subjects; schedule subjects are left out.
	FilterSubjects []string
	// MaxAckPending caps messages delivered and not yet acked.
	MaxAckPending int
	// AckWait is how long the server waits for an ack before redelivering.
	AckWait time.Duration
}

// EnsureConsumer creates or updates the durable pull consumer: explicit
// acks, no BackOff (it would lengthen every NakWithDelay), and unlimited
// deliveries, because a throttled job is redelivered as often as it is
// deferred and must never be dropped for it. Handler failures are counted
// apart, by the worker.
func EnsureConsumer(ctx context.Context, js jetstream.JetStream, spec ConsumerSpec) (jetstream.Consumer, error) {
	cfg := jetstream.ConsumerConfig{
		Durable:       spec.Name,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		MaxDeliver:    -1,
		MaxAckPending: spec.MaxAckPending,
		AckWait:       spec.AckWait,
	}
	if len(spec.FilterSubjects) == 1 {
		cfg.FilterSubject = spec.FilterSubjects[0]
	} else {
		cfg.FilterSubjects = spec.FilterSubjects
	}
	c, err := js.CreateOrUpdateConsumer(ctx, spec.Stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("consumer %s on stream %s: %w", spec.Name, spec.Stream, err)
	}
	return c, nil
}

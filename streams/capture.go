package streams

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// CaptureSpec describes an output subject the worker publishes to with
// publish acks, and the stream it creates to store it if none does.
type CaptureSpec struct {
	// Subject is the pattern published to, such as "done.*".
	Subject string
	// Fallback names the stream created when none stores Subject.
	Fallback string
	// Replicas is the created stream's replicas, at least 1: the worker
	// passes the jobs stream's, so that a job acked once forwarded is as
	// safe as it was in the jobs stream.
	Replicas int
	// MaxAge, when positive, is the created stream's max age.
	MaxAge time.Duration
}

// EnsureCaptured makes sure some stream stores messages published to
// spec.Subject: if none does, it creates spec.Fallback for it. It returns
// the stream that stores them. A stream that already exists, whoever made
// it, is never an error, and is left as it is.
func EnsureCaptured(ctx context.Context, js jetstream.JetStream, spec CaptureSpec) (jetstream.Stream, error) {
	name, err := js.StreamNameBySubject(ctx, spec.Subject)
	switch {
	case err == nil:
		s, err := js.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("stream %s for %s: %w", name, spec.Subject, err)
		}
		return s, nil
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, fmt.Errorf("looking up the stream for %s: %w", spec.Subject, err)
	}
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:      spec.Fallback,
		Subjects:  []string{spec.Subject},
		Storage:   jetstream.FileStorage,
		Retention: jetstream.LimitsPolicy,
		Replicas:  max(1, spec.Replicas),
		MaxAge:    spec.MaxAge,
	})
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		s, err = js.Stream(ctx, spec.Fallback) // another worker created it first
	}
	if err != nil {
		return nil, fmt.Errorf("creating stream %s for %s: %w", spec.Fallback, spec.Subject, err)
	}
	return s, nil
}

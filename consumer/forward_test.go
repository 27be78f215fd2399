package consumer

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestUnavailableTellsOutagesFromRefusals: a publish error that says
// JetStream could not store the job now (no stream answered, a timeout, a
// reconnect, JetStream unavailable) holds the job; one about the stream's
// limits or the message fails it, as before.
func TestUnavailableTellsOutagesFromRefusals(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("forward to done.acme: %w", err) }
	for _, c := range []struct {
		err  error
		want bool
	}{
		{wrap(jetstream.ErrNoStreamResponse), true},
		{wrap(nats.ErrNoResponders), true},
		{wrap(nats.ErrTimeout), true},
		{wrap(context.DeadlineExceeded), true},
		{wrap(nats.ErrConnectionReconnecting), true},
		{wrap(&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}), true},
		{wrap(&jetstream.APIError{Code: 503, ErrorCode: storeRefused, Description: "maximum messages per subject exceeded"}), false},
		{wrap(&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamMessageExceedsMaximum, Description: "message size exceeds maximum allowed"}), false},
		{errors.New("forward to done.acme: something else"), false},
	} {
		if got := unavailable(c.err); got != c.want {
			t.Errorf("unavailable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

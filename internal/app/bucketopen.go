package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"
)

// openBucket opens a key-value bucket the worker watches (the limits or
// the pauses), retrying with backoff while JetStream cannot answer, since
// the worker must not decide before it has read the bucket. It returns
// false when ctx ends first.
func openBucket(ctx context.Context, what, bucket string, open func(context.Context) (jetstream.KeyValue, error), log *slog.Logger) (jetstream.KeyValue, bool) {
	var kv jetstream.KeyValue
	try := func() error {
		var err error
		kv, err = open(ctx)
		return err
	}
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(200*time.Millisecond),
		backoff.WithMaxInterval(10*time.Second), backoff.WithMaxElapsedTime(0))
	notify := func(err error, d time.Duration) {
		log.Warn("opening the "+what+" bucket failed; retrying", "bucket", bucket, "err", err, "retry_in", d)
	}
	if err := backoff.RetryNotify(try, backoff.WithContext(bo, ctx), notify); err != nil {
		return nil, false // ctx ended
	}
	return kv, true
}

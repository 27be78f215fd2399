package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/config"
	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/pause"
)

// livePauses returns the paused tenants, watched in the pause bucket
// until ctx ends, once the bucket's pauses are in (a worker that decided
// before could start a paused tenant's jobs after a restart). With the
// bucket off it returns nil, nil: nothing is ever paused. It returns nil,
// false when ctx ends first.
func livePauses(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, cfg *Settings, replicas int, log *slog.Logger) (consumer.Pauser, bool) {
	if cfg.PauseBucket == config.LimitsOff {
		return nil, true
	}
	var kv jetstream.KeyValue
	open := func() error {
		var err error
		kv, err = pause.OpenBucket(ctx, js, cfg.PauseBucket, replicas)
		return err
	}
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(200*time.Millisecond),
		backoff.WithMaxInterval(10*time.Second), backoff.WithMaxElapsedTime(0))
	notify := func(err error, d time.Duration) {
		log.Warn("opening the pause bucket failed; retrying", "bucket", cfg.PauseBucket, "err", err, "retry_in", d)
	}
	if err := backoff.RetryNotify(open, backoff.WithContext(bo, ctx), notify); err != nil {
		return nil, false // ctx ended
	}
	set := pause.NewSet()
	w := pause.NewWatcher(set, kv, log)
	w.Conn = nc
	go w.Run(ctx)
	ender := pauseEnder{set: set, every: pauseEndEvery, now: time.Now, log: log,
		opts: pause.Options{JetStream: js, Bucket: cfg.PauseBucket, Stream: cfg.Stream, Schedules: cfg.Schedules}}
	go ender.run(ctx)
	select {
	case <-w.Ready():
		return set, true
	case <-ctx.Done():
		return nil, false
	}
}

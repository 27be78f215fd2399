package app

import (
	"context"
	"log/slog"
	"time"

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
	kv, ok := openBucket(ctx, "pause", cfg.PauseBucket, func(ctx context.Context) (jetstream.KeyValue, error) {
		return pause.OpenBucket(ctx, js, cfg.PauseBucket, replicas)
	}, log)
	if !ok {
		return nil, false
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

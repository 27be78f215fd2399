package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/bundle"
	"github.com/throttler/throttler/tenant"
)

// unbundler unpacks the fired bundles of moved jobs (Params.Bundles).
type unbundler struct {
	bundles  jetstream.Consumer // nil without one
	js       jetstream.JetStream
	pull     *puller         // the worker's, which sets a gone consumer up again
	handlers *sync.WaitGroup // the worker's: shutdown waits for an unpacking under way
	// deadLetter is the worker's dead letters' settle.
	deadLetter func(ctx context.Context, msg jetstream.Msg, id, tenant, reason string, failures int64) bool
	cfg        Config
	log        *slog.Logger
}

// start unpacks fired bundles of moved jobs until ctx is cancelled. Run's
// shutdown waits for it with the handlers, not with stop: an unpacking
// under way runs to its end. A worker has it when it has a bundles
// consumer.
func (u *unbundler) start(ctx, _ context.Context) (stop func()) {
	u.handlers.Add(1)
	go func() {
		defer u.handlers.Done()
		u.loop(ctx)
	}()
	return func() {}
}

// loop pulls fired bundles from the bundles consumer (filtering
// <prefix>.u.*.*, which no single copy's subject matches) and unpacks them
// with unbundle until ctx is cancelled. A bundle that cannot be unpacked
// now is handed back and tried again after RetryInitial; one that never
// can be (bundle.ErrMalformed) is dead-lettered.
func (u *unbundler) loop(ctx context.Context) {
	for ctx.Err() == nil {
		fctx, cancel := context.WithTimeout(ctx, time.Second)
		batch, err := u.bundles.Fetch(16, jetstream.FetchContext(fctx))
		if err == nil {
			for m := range batch.Messages() {
				u.unbundleOne(ctx, m)
			}
			err = batch.Error()
		}
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && !errors.Is(err, jetstream.ErrNoMessages) && ctx.Err() == nil {
			u.log.Warn("pulling bundles failed; retrying", "err", err)
			u.pull.recreateIfGone(ctx, err)
			sleep(ctx, u.cfg.RetryInitial)
		}
	}
}

// unbundleOne unpacks one fired bundle, or hands it back, or dead-letters
// it.
func (u *unbundler) unbundleOne(ctx context.Context, m jetstream.Msg) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := unbundle(uctx, u.js, m)
	switch {
	case err == nil:
	case errors.Is(err, bundle.ErrMalformed):
		u.deadLetterBundle(uctx, m, err)
	case errors.Is(err, errBundleLeft):
		u.log.Warn("could not delete an unpacked bundle; it stays in the stream, acked", "subject", m.Subject(), "err", err)
	default:
		u.log.Warn("unpacking a bundle of moved jobs failed; retrying", "subject", m.Subject(), "err", err)
		if nerr := m.NakWithDelay(u.cfg.RetryInitial); nerr != nil {
			u.log.Warn("hand back failed; JetStream redelivers after AckWait", "err", nerr)
		}
	}
}

// unbundle publishes the scheduled copies a fired bundle carries, waits for
// their publish acks, then deletes the bundle from the stream (so a bundle
// still in the stream is one not yet unpacked) and acks it. If publishing
// fails the caller hands the bundle back; unpacked again later, the copies
// already stored are deduplicated by their Nats-Msg-Id. If only the
// deletion fails (a stream that denies deletes, say), the bundle is acked
// all the same, its copies being stored, and the error matches
// errBundleLeft: handed back, it would be unpacked again and again.
func unbundle(ctx context.Context, js jetstream.JetStream, msg jetstream.Msg) error {
	copies, err := bundle.Copies(msg.Data())
	if err != nil {
		return fmt.Errorf("reading bundle: %w", err)
	}
	acks := make([]jetstream.PubAckFuture, 0, len(copies))
	for _, c := range copies {
		f, err := js.PublishMsgAsync(c)
		if err != nil {
			return fmt.Errorf("unbundling %d jobs: %w", len(copies), err)
		}
		acks = append(acks, f)
	}
	for _, f := range acks {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("unbundling %d jobs: %w", len(copies), err)
		case <-ctx.Done():
			return fmt.Errorf("unbundling %d jobs: %w", len(copies), ctx.Err())
		}
	}
	if err := deleteFromStream(ctx, js, msg); err != nil {
		if aerr := msg.Ack(); aerr != nil {
			return fmt.Errorf("acking unpacked bundle: %w", aerr)
		}
		return fmt.Errorf("%w: %w", errBundleLeft, err)
	}
	return msg.Ack()
}

// errBundleLeft says a bundle was unpacked and acked but is still in the
// stream: deleting it failed.
var errBundleLeft = errors.New("unpacked bundle left in the stream")

// deleteFromStream deletes msg from the stream it was delivered from; a
// message already gone is no error.
func deleteFromStream(ctx context.Context, js jetstream.JetStream, msg jetstream.Msg) error {
	meta, err := msg.Metadata()
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	stream, err := js.Stream(ctx, meta.Stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", meta.Stream, err)
	}
	if err := stream.DeleteMsg(ctx, meta.Sequence.Stream); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("stream %s: %w", meta.Stream, err)
	}
	return nil
}

// deadLetterBundle takes a fired bundle that cannot be read out of the way:
// to the dead-letter subject of the tenant its subject names, with the
// reason, its data kept whole, then out of the jobs stream, where a bundle
// counts as moved jobs still waiting.
func (u *unbundler) deadLetterBundle(ctx context.Context, msg jetstream.Msg, cause error) {
	// The subject is <prefix>.u.<tenant>.<id>; the prefix may hold dots.
	t := ""
	if tokens := strings.Split(msg.Subject(), "."); len(tokens) >= 4 && tenant.Validate(tokens[len(tokens)-2]) == nil {
		t = tokens[len(tokens)-2]
	}
	if !u.deadLetter(ctx, msg, "", t, "unreadable bundle of moved jobs: "+cause.Error(), 0) {
		return
	}
	if err := deleteFromStream(ctx, u.js, msg); err != nil {
		u.log.Warn("deleting a dead-lettered bundle failed; it stays in the jobs stream, acked", "subject", msg.Subject(), "err", err)
	}
}

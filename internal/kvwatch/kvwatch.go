// Package kvwatch follows a NATS key-value bucket for as long as a worker
// runs: one watch of every key, read once from the start and then from the
// last revision seen, resumed there (never re-reading the bucket) when it
// ends, fails, or its connection comes back. The live limits and the
// pauses are both read this way.
package kvwatch

import (
	"context"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Options say what Run watches.
type Options struct {
	// Bucket is the bucket watched. Required.
	Bucket jetstream.KeyValue
	// Conn, if set, is the bucket's connection: each time it reconnects
	// the watch resumes at once, rather than when its consumer notices
	// that the server it was on went away (tens of seconds later).
	Conn *nats.Conn
	// Log receives a line when the watch fails or ends. Required.
	Log *slog.Logger
	// What names the values in those lines: "limits", "pauses".
	What string
}

// Run calls apply with every entry of the bucket, then with every change,
// until ctx ends; initial says the entry was in the bucket when Run began.
// It calls loaded once, when the initial entries are all applied. While
// NATS is unreachable nothing is applied: what was applied stays.
func Run(ctx context.Context, o Options, apply func(e jetstream.KeyValueEntry, initial bool), loaded func()) {
	var next uint64 // the revision to resume from; 0: the latest values
	initial := true
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond),
		backoff.WithMaxInterval(5*time.Second), backoff.WithMaxElapsedTime(0))
	var reconnected chan nats.Status
	if o.Conn != nil {
		reconnected = o.Conn.StatusChanged(nats.CONNECTED)
		defer o.Conn.RemoveStatusListener(reconnected)
	}
	for ctx.Err() == nil {
		var opts []jetstream.WatchOpt
		if next > 0 {
			opts = append(opts, jetstream.IncludeHistory(), jetstream.ResumeFromRevision(next))
		}
		kw, err := o.Bucket.WatchAll(ctx, opts...)
		if err != nil {
			o.Log.Warn("watching the "+o.What+" bucket failed; the last "+o.What+" stay", "bucket", o.Bucket.Bucket(), "err", err)
			if !sleep(ctx, bo.NextBackOff()) {
				return
			}
			continue
		}
		bo.Reset()
		resumeNow := false
	read:
		for {
			var e jetstream.KeyValueEntry
			var ok bool
			select {
			case e, ok = <-kw.Updates():
			case <-reconnected:
				resumeNow = true
				break read
			case <-ctx.Done():
				break read
			}
			if !ok {
				break read
			}
			if e == nil {
				if initial {
					initial = false
					loaded()
				}
				continue
			}
			next = e.Revision() + 1
			apply(e, initial)
		}
		_ = kw.Stop()
		if ctx.Err() == nil && !resumeNow {
			o.Log.Warn("the "+o.What+" watch ended; resuming it", "bucket", o.Bucket.Bucket(), "from_revision", next)
			if !sleep(ctx, bo.NextBackOff()) {
				return
			}
		}
	}
}

// sleep waits d or until ctx ends, and reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

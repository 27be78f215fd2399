package pause

import (
	"context"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Watcher keeps a Set up to date with the pause bucket: one watch from the
// last revision seen, resumed there after a reconnect, never re-reading
// the bucket.
type Watcher struct {
	// Set receives the bucket's pauses. Required.
	Set *Set
	// Bucket is the pause bucket. Required.
	Bucket jetstream.KeyValue
	// Log receives a line per change and per unreadable value. Required.
	Log *slog.Logger
	// Conn, if set, is the bucket's connection: the watch resumes as soon
	// as it reconnects.
	Conn *nats.Conn
	// OnLift, if set, is called with a tenant whose pause was removed
	// (resumed), after the Set forgot it.
	OnLift func(tenant string)

	ready chan struct{}
}

// NewWatcher returns a Watcher of bucket into set.
func NewWatcher(set *Set, bucket jetstream.KeyValue, log *slog.Logger) *Watcher {
	return &Watcher{Set: set, Bucket: bucket, Log: log, ready: make(chan struct{})}
}

// Ready is closed once every pause the bucket held when Run began is in
// the Set: a worker that decided before could start a paused tenant's
// jobs.
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// Run applies the bucket's pauses, then every change, until ctx ends.
// While NATS is unreachable the last pauses stay in force.
func (w *Watcher) Run(ctx context.Context) {
	var next uint64 // the revision to resume from; 0: the latest values
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond),
		backoff.WithMaxInterval(5*time.Second), backoff.WithMaxElapsedTime(0))
	var reconnected chan nats.Status
	if w.Conn != nil {
		reconnected = w.Conn.StatusChanged(nats.CONNECTED)
		defer w.Conn.RemoveStatusListener(reconnected)
	}
	for ctx.Err() == nil {
		var opts []jetstream.WatchOpt
		if next > 0 {
			opts = append(opts, jetstream.IncludeHistory(), jetstream.ResumeFromRevision(next))
		}
		kw, err := w.Bucket.WatchAll(ctx, opts...)
		if err != nil {
			w.Log.Warn("watching the pause bucket failed; the last pauses stay", "bucket", w.Bucket.Bucket(), "err", err)
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
				if !isClosed(w.ready) {
					w.Log.Info("pauses loaded", "bucket", w.Bucket.Bucket(), "paused", w.Set.Len())
					close(w.ready)
				}
				continue
			}
			next = e.Revision() + 1
			w.apply(e, isClosed(w.ready))
		}
		_ = kw.Stop()
		if ctx.Err() == nil && !resumeNow {
			w.Log.Warn("the pause watch ended; resuming it", "bucket", w.Bucket.Bucket(), "from_revision", next)
			if !sleep(ctx, bo.NextBackOff()) {
				return
			}
		}
	}
}

// apply applies one entry; live says the initial values are in, so the
// change is logged.
func (w *Watcher) apply(e jetstream.KeyValueEntry, live bool) {
	t, ok := TenantOf(e.Key())
	if !ok {
		return // a scope this version does not apply (group.*, _global)
	}
	if e.Operation() != jetstream.KeyValuePut {
		w.Set.Remove(t)
		if live {
			w.Log.Info("tenant resumed", "tenant", t, "revision", e.Revision())
		}
		if w.OnLift != nil {
			w.OnLift(t)
		}
		return
	}
	v, err := Decode(e.Value())
	if err != nil {
		// A value nobody could have meant as "run": still a pause, of no
		// reason, so an operator's mistake never releases a tenant.
		w.Log.Warn("unreadable pause value; the tenant is paused without a reason", "key", e.Key(), "revision", e.Revision(), "err", err)
		v = Value{Since: e.Created(), Reason: "unreadable pause value"}
	}
	p := Pause{Key: e.Key(), Tenant: t, Reason: v.Reason, Since: v.Since, Until: v.Until, Revision: e.Revision()}
	w.Set.Put(p)
	if live {
		w.Log.Info("tenant paused", "tenant", t, "reason", v.Reason, "until", v.Until, "revision", e.Revision())
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

// isClosed reports whether c is closed.
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

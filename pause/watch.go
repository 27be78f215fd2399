package pause

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/kvwatch"
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
	kvwatch.Run(ctx, kvwatch.Options{Bucket: w.Bucket, Conn: w.Conn, Log: w.Log, What: "pauses"},
		func(e jetstream.KeyValueEntry, initial bool) { w.apply(e, !initial) },
		func() {
			w.Log.Info("pauses loaded", "bucket", w.Bucket.Bucket(), "paused", w.Set.Len())
			close(w.ready)
		})
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
		// An open-ended pause logs until=resumed, not the zero time.
		var until any = "resumed"
		if !v.Until.IsZero() {
			until = v.Until
		}
		w.Log.Info("tenant paused", "tenant", t, "reason", v.Reason, "until", until, "revision", e.Revision())
	}
}

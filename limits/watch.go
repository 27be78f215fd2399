package limits

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/kvwatch"
	"github.com/throttler/throttler/throttle"
)

// Watcher keeps a Store, and Levels, up to date with a bucket.
type Watcher struct {
	// Store receives what the bucket holds for the tenants.
	Store *Store
	// Levels, if set, receives what the bucket holds for the levels above
	// the tenant (LevelKey); without it their keys are passed over. They
	// never reach Store.
	Levels *Levels
	// Bucket is the key-value bucket of limits.
	Bucket jetstream.KeyValue
	// DefaultBurst and ShadowAll read values as Spec does.
	DefaultBurst int64
	ShadowAll    bool
	// NoCaps refuses a value with a running cap (running:N) as a bad
	// value: the worker's handler cannot see when a job ends (forward).
	NoCaps bool
	// Log receives a line per change, and one per bad value.
	Log *slog.Logger
	// OnBad, if set, counts a value that could not be read: key is its
	// tenant (or DefaultKey, or a level's key, or the key itself when it
	// names no tenant).
	OnBad func(key string)
	// BeforeChange, if set, is called with a tenant's policy and the one
	// replacing it, before the store applies it (not for the values read
	// at start, nor for DefaultKey): the worker carries the tenant's
	// buckets over to limits of other periods there (throttle.Carry).
	BeforeChange func(ctx context.Context, tenant string, from, to throttle.Policy)
	// Loaded, if set, is called with each tenant's policy read at start
	// (not DefaultKey's) and when its value was written: the worker brings
	// back the jobs still moved under the limits a recent change replaced,
	// which it did not see happen.
	Loaded func(ctx context.Context, tenant string, p throttle.Policy, written time.Time)
	// DefaultChanged, if set, is called after a change of the default's
	// policy (DefaultKey set or removed, not at start) is applied to the
	// store: the worker brings back the jobs of tenants under the default
	// moved to wait under the default it replaced.
	DefaultChanged func(ctx context.Context)
	// Conn, if set, is the bucket's connection: each time it reconnects
	// the watch resumes at once, rather than when its consumer notices
	// that the server it was on went away (tens of seconds later).
	Conn *nats.Conn

	once  sync.Once
	ready chan struct{}
}

// Ready is closed once every value the bucket held when Run began has been
// applied: a worker that decides before it would use the environment's
// limits for tenants that have their own.
func (w *Watcher) Ready() <-chan struct{} {
	w.once.Do(func() { w.ready = make(chan struct{}) })
	return w.ready
}

// Run applies the bucket's values, then every change, until ctx ends.
// While NATS is unreachable the last values stay; the watch resumes where
// it stopped, never reading the whole bucket again.
func (w *Watcher) Run(ctx context.Context) {
	w.Ready()
	loaded, bad := 0, 0
	kvwatch.Run(ctx, kvwatch.Options{Bucket: w.Bucket, Conn: w.Conn, Log: w.Log, What: "limits"},
		func(e jetstream.KeyValueEntry, initial bool) {
			if initial {
				loaded++
			}
			if !w.apply(ctx, e, initial) {
				bad++
			}
		},
		func() {
			levels := 0
			if w.Levels != nil {
				levels = w.Levels.Overrides()
			}
			w.Log.Info("limits loaded", "bucket", w.Bucket.Bucket(), "values", loaded, "bad", bad, "tenants", w.Store.Overrides(), "levels", levels)
			close(w.ready)
		})
}

// apply applies one entry, logging each change once the initial values are
// in. It reports whether the entry could be read.
func (w *Watcher) apply(ctx context.Context, e jetstream.KeyValueEntry, initial bool) bool {
	key := e.Key()
	if _, ok, _ := LevelKey(key); ok {
		return w.applyLevel(ctx, e, initial)
	}
	var before throttle.Policy
	if key == DefaultKey {
		before = w.Store.Default()
	}
	if e.Operation() == jetstream.KeyValueDelete || e.Operation() == jetstream.KeyValuePurge {
		if !initial {
			w.beforeChange(ctx, key, w.Store.Fallback(key))
		}
		w.Store.Remove(key)
		if !initial {
			w.Log.Info("limit removed; the environment's applies", "key", key, "revision", e.Revision())
			w.defaultChanged(ctx, key, before)
		}
		return true
	}
	p, err := w.read(key, string(e.Value()))
	if err != nil {
		w.Log.Warn("ignoring a bad value in the limits bucket; the tenant keeps its limit", "key", key,
			"value", string(e.Value()), "revision", e.Revision(), "err", err)
		if w.OnBad != nil {
			w.OnBad(key)
		}
		if initial && CheckKey(key) == nil {
			// The limit the tenant had before is the latest good value.
			w.lastGood(ctx, key, func(spec string, p throttle.Policy) { w.Store.Set(key, spec, p) })
		}
		return false
	}
	if !initial {
		w.beforeChange(ctx, key, p)
	}
	w.Store.Set(key, string(e.Value()), p)
	if !initial {
		w.Log.Info("limit set", "key", key, "spec", p.String(), "revision", e.Revision())
		w.defaultChanged(ctx, key, before)
	} else if w.Loaded != nil && key != DefaultKey && CheckKey(key) == nil {
		w.Loaded(ctx, key, p, e.Created())
	}
	return true
}

// beforeChange calls BeforeChange for a tenant's key whose policy becomes
// to.
func (w *Watcher) beforeChange(ctx context.Context, key string, to throttle.Policy) {
	if w.BeforeChange == nil || key == DefaultKey || CheckKey(key) != nil {
		return
	}
	w.BeforeChange(ctx, key, w.Store.Policy(key), to)
}

// defaultChanged calls DefaultChanged when key is DefaultKey and the
// default's policy, before the change, is another now.
func (w *Watcher) defaultChanged(ctx context.Context, key string, before throttle.Policy) {
	if key == DefaultKey && w.DefaultChanged != nil && w.Store.Default().String() != before.String() {
		w.DefaultChanged(ctx)
	}
}

// read checks a key and reads its value, as Reader does.
func (w *Watcher) read(key, value string) (throttle.Policy, error) {
	return Reader{DefaultBurst: w.DefaultBurst, ShadowAll: w.ShadowAll, NoCaps: w.NoCaps}.Read(key, value)
}

// lastGood applies, with set, the latest value of key that can be read,
// from its history, if it has one.
func (w *Watcher) lastGood(ctx context.Context, key string, set func(spec string, p throttle.Policy)) {
	hist, err := w.Bucket.History(ctx, key)
	if err != nil {
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			w.Log.Warn("reading a bad key's history failed; the environment's limit applies", "key", key, "err", err)
		}
		return
	}
	for i := len(hist) - 1; i >= 0; i-- {
		e := hist[i]
		if e.Operation() != jetstream.KeyValuePut {
			return
		}
		if p, err := w.read(key, string(e.Value())); err == nil {
			set(string(e.Value()), p)
			w.Log.Info("applying the latest good value of a bad key", "key", key, "spec", p.String(), "revision", e.Revision())
			return
		}
	}
}

package limits

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/throttle"
)

// applyLevel applies one entry of a level's key (LevelKey) to Levels, as
// apply does a tenant's: a value that cannot be read changes nothing (the
// level keeps the limit it had) and is logged and counted; read at start,
// the key's latest good value applies instead. It reports whether the
// entry could be read.
func (w *Watcher) applyLevel(ctx context.Context, e jetstream.KeyValueEntry, initial bool) bool {
	if w.Levels == nil {
		return true
	}
	key := e.Key()
	lvl, _, keyErr := LevelKey(key)
	if e.Operation() == jetstream.KeyValueDelete || e.Operation() == jetstream.KeyValuePurge {
		if keyErr != nil {
			return true
		}
		w.Levels.Remove(lvl)
		if !initial {
			w.Log.Info("limit removed; the environment's applies", "key", key, "revision", e.Revision())
		}
		return true
	}
	p, err := w.read(key, string(e.Value()))
	if err != nil {
		w.Log.Warn("ignoring a bad value in the limits bucket; the level keeps its limit", "key", key,
			"value", string(e.Value()), "revision", e.Revision(), "err", err)
		if w.OnBad != nil {
			w.OnBad(key)
		}
		if initial && keyErr == nil {
			// The limit the level had before is the latest good value.
			w.lastGood(ctx, key, func(_ string, p throttle.Policy) { w.Levels.Set(lvl, p) })
		}
		return false
	}
	w.Levels.Set(lvl, p)
	if !initial {
		w.Log.Info("limit set", "key", key, "spec", p.String(), "revision", e.Revision())
	}
	return true
}

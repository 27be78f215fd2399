package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/throttler/throttler/pause"
)

// pauseEndEvery is how often a worker looks for pauses whose end has
// come: well within the worker's grace of 2 s, after which their jobs' copies
// come back by themselves, in no set order.
const pauseEndEvery = 200 * time.Millisecond

// pauseEnder ends the pauses of set whose Until has come, each by one
// worker of the fleet (pause.End deletes the pause only at the revision
// read, so one worker wins), so that their jobs come back in their order
// rather than as their copies fire.
type pauseEnder struct {
	set   *pause.Set
	opts  pause.Options
	every time.Duration
	now   func() time.Time
	log   *slog.Logger
}

// run ends pauses until ctx is done. A pause is tried once per revision:
// the winner deletes it, and the watch takes it out of set.
func (e pauseEnder) run(ctx context.Context) {
	tried := map[string]uint64{} // key → revision tried
	t := time.NewTicker(e.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ended := e.set.Ended(e.now())
		keep := make(map[string]uint64, len(ended))
		for _, p := range ended {
			keep[p.Key] = p.Revision
			if tried[p.Key] == p.Revision {
				continue
			}
			e.end(ctx, p)
		}
		tried = keep
	}
}

// end tries to end p, logging what it did.
func (e pauseEnder) end(ctx context.Context, p pause.Pause) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, won, err := pause.End(ctx, e.opts, p)
	switch {
	case err != nil:
		e.log.Warn("ending a pause failed; its jobs come back by themselves", "tenant", p.Tenant, "until", p.Until, "released", res.Released, "err", err)
	case won:
		e.log.Info("pause ended; its jobs brought back in order", "tenant", p.Tenant, "until", p.Until, "released", res.Released)
	}
}

package consumer

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/throttle"
)

// LevelPoker hands the room time made under shared levels (a group's or
// the global limit) to the jobs waiting in their lists;
// *throttle.Shared satisfies it.
type LevelPoker interface {
	// Poke calls the jobs whose turn came under each level, or every job
	// queued under a level that no longer holds jobs back.
	Poke(ctx context.Context, levels []throttle.Level) ([]throttle.Waiter, error)
	// NoteQueuing tells the fleet this worker queued jobs under levels;
	// Queuing returns the levels any worker noted.
	NoteQueuing(ctx context.Context, levels []throttle.Level) error
	Queuing(ctx context.Context) ([]throttle.Level, error)
	// Forfeit gives back the turn of a called job that could not be
	// woken, unless it used it meanwhile.
	Forfeit(ctx context.Context, w throttle.Waiter) error
}

// levelPokeEvery is how often the worker calls the jobs waiting under
// the levels it parked jobs under: the room of a rate comes with time,
// not with a release, so someone must ask. Each call reserves slots a
// lookahead ahead (throttle.SharedOptions), longer than this.
const levelPokeEvery = 40 * time.Millisecond

// levelNoteEvery is how often the worker notes the levels it queued jobs
// under for the fleet, and reads those the fleet noted, to poke them too:
// a worker restarted since its jobs were queued, or another's, still
// hands their turns on (or hands them back, when the level's limit went).
const levelNoteEvery = time.Second

// levelKeeper runs the worker's side of shared levels: it parks the jobs
// a level queued, pokes the levels it parked jobs under, and wakes the
// jobs whose turn came.
type levelKeeper struct {
	poker    LevelPoker // nil without one
	waker    Waker      // nil without one
	parked   latestTimes
	counts   levelCounts
	cfg      Config
	log      *slog.Logger
	rec      *recorder
	handlers *sync.WaitGroup // the worker's: a wake is waited for as a handler
}

// take parks a job a level queued (throttle.Queued): moved off the
// consumer until woken in its turn, or until ParkFor if its call is lost.
func (k *levelKeeper) take(g *groupActs, it *item, res throttle.Result) bool {
	name := res.LevelName
	k.rec.add(it.job.Tenant, func(s *TenantStats) { s.LevelQueued++ })
	k.parked.record(name, k.cfg.Now())
	k.counts.add(name, func(s *LevelStats) { s.Queued++ })
	g.deferrals = append(g.deferrals, Deferral{Msg: it.msg, Job: it.job, Wait: k.cfg.ParkFor, Park: true, Reason: header.WaitTurn + name})
	return true
}

// wake brings back each job whose turn came, in goroutines of its own. A
// job that cannot be woken comes back at its fallback time; the slot it
// was called for is left unused, never given twice. stopping is closed
// when the worker stops pulling: a wake waits for no more retries then.
func (k *levelKeeper) wake(ctx context.Context, stopping <-chan struct{}, ws []throttle.Waiter) {
	if len(ws) == 0 || k.waker == nil {
		return
	}
	for _, wt := range ws {
		k.handlers.Add(1)
		go func() {
			defer k.handlers.Done()
			found, err := k.wakeOne(ctx, stopping, wt)
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.cfg.RedisTimeout)
			defer cancel()
			switch {
			case err != nil:
				k.log.Warn("waking a job queued under a shared level failed; it comes back by itself", "tenant", wt.Tenant, "job", wt.JobID, "err", err)
			case found:
				k.rec.add(wt.Tenant, func(s *TenantStats) { s.Woken++ })
			case k.poker != nil:
				// No parked copy: the job came back by itself, or was
				// purged. Its turn goes to the next, unless it used it.
				if err := k.poker.Forfeit(lctx, wt); err != nil {
					k.log.Debug("giving back the turn of a job without a parked copy failed", "tenant", wt.Tenant, "job", wt.JobID, "err", err)
				}
			}
		}()
	}
}

// levelWakeRetries are the pauses before a level's called job is looked
// for again when its parked copy was not found: a job called the moment
// it was queued may have its copy stored only once its worker's defer
// loop gets to it, seconds later under a flood. A turn is given back only
// after them.
var levelWakeRetries = []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}

// wakeOne wakes wt, looking for its parked copy again after each of
// levelWakeRetries while the worker is not stopping.
func (k *levelKeeper) wakeOne(ctx context.Context, stopping <-chan struct{}, wt throttle.Waiter) (bool, error) {
	for i := 0; ; i++ {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.cfg.RedisTimeout+3*time.Second)
		found, err := k.waker.Wake(lctx, wt.Tenant, wt.JobID)
		cancel()
		if found || err != nil || i == len(levelWakeRetries) {
			return found, err
		}
		select {
		case <-time.After(levelWakeRetries[i]):
		case <-stopping:
			return false, nil
		case <-ctx.Done():
			return false, nil
		}
	}
}

// pokeLoop pokes, every levelPokeEvery, the levels this worker parked
// jobs under within ParkFor, and wakes the jobs called, until done;
// stopping is closed when the worker stops pulling.
func (k *levelKeeper) pokeLoop(ctx context.Context, stopping, done <-chan struct{}) {
	tick := time.NewTicker(levelPokeEvery)
	defer tick.Stop()
	var fleet []throttle.Level // the levels the fleet noted, read each levelNoteEvery
	var noted time.Time
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		var mine []throttle.Level
		for _, name := range k.parked.since(k.cfg.Now().Add(-k.cfg.ParkFor)) {
			if lv, ok := throttle.ParseLevel(name); ok {
				mine = append(mine, lv)
			}
		}
		levels := mine
		if now := k.cfg.Now(); now.Sub(noted) >= levelNoteEvery {
			noted = now
			fleet = k.noteAndRead(ctx, mine)
			for _, lv := range fleet {
				if !slices.Contains(levels, lv) {
					levels = append(levels, lv)
				}
			}
		}
		if len(levels) == 0 {
			continue
		}
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.cfg.RedisTimeout)
		ws, err := k.poker.Poke(lctx, levels)
		cancel()
		if err != nil {
			k.log.Debug("poking shared levels failed", "err", err)
		}
		k.wake(ctx, stopping, ws)
	}
}

// noteAndRead notes the levels this worker queued jobs under and returns
// those the fleet noted; a failure is logged, and the worker pokes its
// own levels meanwhile.
func (k *levelKeeper) noteAndRead(ctx context.Context, mine []throttle.Level) []throttle.Level {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.cfg.RedisTimeout)
	defer cancel()
	if len(mine) > 0 {
		if err := k.poker.NoteQueuing(lctx, mine); err != nil {
			k.log.Debug("noting the levels jobs were queued under failed", "err", err)
		}
	}
	fleet, err := k.poker.Queuing(lctx)
	if err != nil {
		k.log.Debug("reading the levels the fleet queued jobs under failed", "err", err)
	}
	return fleet
}

// start runs pokeLoop until stop is called, its calls under work, its
// wakes' retries until ctx (the pulling's) is done. A worker has it when
// it has a LevelPoker.
func (k *levelKeeper) start(ctx, work context.Context) (stop func()) {
	return startLoop(func(done <-chan struct{}) { k.pokeLoop(work, ctx.Done(), done) })
}

// LevelStats counts what one shared level did to this worker's jobs.
type LevelStats struct {
	// Queued counts jobs parked to wait for their turn under the level.
	Queued int64
	// Slotted counts jobs the level gave a slot ahead, which waited for it.
	Slotted int64
	// ShadowWaited counts jobs a level in shadow mode would have made wait.
	ShadowWaited int64
}

// levelCounts holds LevelStats by level name. Safe for concurrent use;
// the zero value is ready. Levels are few (the global one and the
// groups with limits), so every one is kept.
type levelCounts struct {
	mu sync.Mutex
	m  map[string]*LevelStats
}

// add applies f to level's counts.
func (c *levelCounts) add(level string, f func(*LevelStats)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*LevelStats{}
	}
	s := c.m[level]
	if s == nil {
		s = &LevelStats{}
		c.m[level] = s
	}
	f(s)
}

// snapshot copies the counts.
func (c *levelCounts) snapshot() map[string]LevelStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]LevelStats, len(c.m))
	for k, v := range c.m {
		out[k] = *v
	}
	return out
}

// decided counts what a decision of the levels did to a job that was not
// queued: a slot ahead to wait for, or a wait a shadow level spared.
func (k *levelKeeper) decided(d throttle.Decision) {
	if d.LevelName == "" {
		return
	}
	switch {
	case d.Outcome == throttle.Reserved:
		k.counts.add(d.LevelName, func(s *LevelStats) { s.Slotted++ })
	case d.Outcome == throttle.Admitted && d.ShadowWait > 0:
		k.counts.add(d.LevelName, func(s *LevelStats) { s.ShadowWaited++ })
	}
}

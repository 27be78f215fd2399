package consumer

import (
	"log/slog"
	"sync"
	"time"
)

// capKeeper runs the worker's side of running caps (caps.go): it parks
// the jobs a cap holds, gives back and renews the leases of running jobs,
// pokes the caps it parked jobs under and wakes the jobs whose turn came.
//
// Its methods name their receiver w, as when they were the Worker's, so
// that caps.go reads as before.
type capKeeper struct {
	leases Leaser // nil without one
	waker  Waker  // nil without one
	// parked: the caps this worker parked jobs under lately ("" is the
	// fleet's), each with when it last did: poked until ParkFor has passed.
	parked latestTimes
	// runtimes: how long the jobs this worker ran under each cap took.
	runtimes runTimes

	cfg      Config
	log      *slog.Logger
	stats    *Stats
	handlers *sync.WaitGroup // the worker's: a wake is waited for as a handler
	inflight *sync.Map       // the worker's flights, whose leases are renewed
}

// now reads the worker's clock.
func (w *capKeeper) now() time.Time { return w.cfg.Now() }

package consumer

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/throttle"
)

// Leaser gives back, renews and hands on the leases of running caps;
// *throttle.RunningCaps satisfies it.
type Leaser interface {
	// Finish gives back the leases of a run that ended and returns the
	// waiting jobs whose turn that made.
	Finish(ctx context.Context, leases []throttle.Lease) ([]throttle.Waiter, error)
	// Renew extends the leases of running jobs and returns those that had
	// expired.
	Renew(ctx context.Context, leases []throttle.Lease) ([]throttle.Lease, error)
	// Poke hands the room of expired leases of each tenant's cap ("" for
	// the fleet's) to waiting jobs, and returns them.
	Poke(ctx context.Context, tenants []string) ([]throttle.Waiter, error)
	// Forfeit gives up the turn of a waiting job that cannot be woken, and
	// returns the next in line.
	Forfeit(ctx context.Context, w throttle.Waiter, fleet bool) ([]throttle.Waiter, error)
}

// Waker brings a parked job back to the jobs consumer at once. Wake
// reports found=false when the job has no parked copy (it came back by
// itself, or was never parked): its turn then goes to the next in line.
// *release.Waker satisfies it.
type Waker interface {
	Wake(ctx context.Context, tenant, jobID string) (found bool, err error)
}

// capKeeper runs the worker's side of running caps: it parks
// the jobs a cap holds, gives back and renews the leases of running jobs,
// pokes the caps it parked jobs under and wakes the jobs whose turn came.
//
// Its methods name their receiver w, as when they were the Worker's.
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
	rec      *recorder
	handlers *sync.WaitGroup // the worker's: a wake is waited for as a handler
	inflight *sync.Map       // the worker's flights, whose leases are renewed
}

// now reads the worker's clock.
func (w *capKeeper) now() time.Time { return w.cfg.Now() }

// unforetoldPark is a parked job's fallback time before any run under its
// cap was seen: a backlog taken in at once parks most of its jobs then.
const unforetoldPark = 2 * time.Minute

// pokeEvery is how often the worker hands the room of expired leases on,
// for the caps it parked jobs under: a lease of a worker that died frees
// no room until a call sees it expired.
const pokeEvery = time.Second

// capOf is the cap a Capped decision waits under: its tenant's, or ""
// for the fleet's.
func capOf(job Job, d throttle.Decision) string {
	if d.CapKind == throttle.TenantCap {
		return job.Tenant
	}
	return ""
}

// take parks a job the Decider told to wait for a lease
// (throttle.Capped): it is moved off the consumer, on its own, until it
// is woken, or until its fallback time (parkFor) if its call is lost.
func (w *capKeeper) take(g *groupActs, it *item, res throttle.Result) bool {
	w.rec.add(it.job.Tenant, func(s *TenantStats) { s.CapDeferred++ })
	c := capOf(it.job, res.Decision)
	w.parked.record(c, w.now())
	g.deferrals = append(g.deferrals, Deferral{Msg: it.msg, Job: it.job, Wait: w.parkFor(c, res.Decision), Park: true,
		Reason: header.WaitLease + res.CappedBy})
	return true
}

// parkFor is how long a parked job stays parked if never woken: twice the
// wait its place in line foretells (the jobs ahead of it over the cap,
// times the cap's mean run time as this worker saw it) and 10 s more, at
// most ParkFor; unforetold (no run under the cap seen yet), 2 minutes. A
// job is woken long before, in its turn: the fallback brings it back when
// its waiting list was lost with a Redis that restarted empty.
func (w *capKeeper) parkFor(capKey string, d throttle.Decision) time.Duration {
	mean, ok := w.runtimes.mean(capKey)
	if !ok || d.Cap <= 0 {
		return min(w.cfg.ParkFor, unforetoldPark)
	}
	foretold := time.Duration(float64(d.Ahead+1) / float64(d.Cap) * float64(mean))
	return min(w.cfg.ParkFor, 2*foretold+10*time.Second)
}

// leaseCtx bounds a lease call; it outlives the worker's cancellation, so
// that leases are given back during shutdown.
func (w *capKeeper) leaseCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), w.cfg.RedisTimeout)
}

// finishLeases gives back the leases of a job that ended, and wakes the
// jobs whose turn that made. A failure leaves the leases to expire after
// LeaseTTL: the cap runs fewer jobs meanwhile, never more.
func (w *capKeeper) finishLeases(ctx context.Context, f *flight, tenant string) {
	if len(f.leases) == 0 || w.leases == nil {
		return
	}
	w.rec.add(tenant, func(s *TenantStats) { s.Running-- })
	ran := w.now().Sub(f.started)
	for _, ls := range f.leases {
		w.runtimes.add(ls.Tenant, ran)
	}
	lctx, cancel := w.leaseCtx(ctx)
	wake, err := w.leases.Finish(lctx, f.leases)
	cancel()
	if err != nil {
		w.log.Warn("giving back a lease failed; it expires by itself", "tenant", tenant, "err", err)
	}
	w.wake(ctx, wake)
}

// wake brings back each waiting job whose turn came, in goroutines of its
// own. A job without a parked copy gives its turn to the next in line;
// one that could not be woken keeps its turn until the call TTL ends.
func (w *capKeeper) wake(ctx context.Context, ws []throttle.Waiter) {
	if len(ws) == 0 || w.leases == nil {
		return
	}
	if w.waker == nil {
		return // the parked jobs come back by themselves and find their turn
	}
	for _, wt := range ws {
		w.handlers.Add(1)
		go func() {
			defer w.handlers.Done()
			w.wakeOne(ctx, wt)
		}()
	}
}

// wakeOne wakes one waiting job, as wake does.
func (w *capKeeper) wakeOne(ctx context.Context, wt throttle.Waiter) {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.RedisTimeout+3*time.Second)
	defer cancel()
	found, err := w.waker.Wake(lctx, wt.Tenant, wt.JobID)
	switch {
	case found:
		if err != nil {
			w.log.Warn("woke a parked job; its parked copy is left to come back as a duplicate", "tenant", wt.Tenant, "job", wt.JobID, "err", err)
		}
		w.rec.add(wt.Tenant, func(s *TenantStats) { s.Woken++ })
		return
	case err != nil:
		w.log.Warn("waking a parked job failed; it keeps its turn for a while, then comes back by itself",
			"tenant", wt.Tenant, "job", wt.JobID, "err", err)
		return
	}
	// Forfeit on both caps the job may be waiting under: only the one that
	// called it holds its turn, the other has nothing to give up.
	var next []throttle.Waiter
	for _, fleet := range []bool{false, true} {
		ws, err := w.leases.Forfeit(lctx, wt, fleet)
		if err != nil {
			w.log.Warn("handing on the turn of a job without a parked copy failed", "tenant", wt.Tenant, "job", wt.JobID, "err", err)
		}
		next = append(next, ws...)
	}
	w.wake(ctx, next)
}

// leaseLoop renews the leases of the running jobs every LeaseTTL/3 and
// pokes the caps this worker parked jobs under every pokeEvery, until done
// is closed.
func (w *capKeeper) leaseLoop(ctx context.Context, done <-chan struct{}) {
	renew := time.NewTicker(max(10*time.Millisecond, w.cfg.LeaseTTL/3))
	defer renew.Stop()
	poke := time.NewTicker(pokeEvery)
	defer poke.Stop()
	for {
		select {
		case <-done:
			return
		case <-renew.C:
			w.renewLeases(ctx)
		case <-poke.C:
			caps := w.parked.since(w.now().Add(-w.cfg.ParkFor))
			if len(caps) == 0 {
				continue
			}
			lctx, cancel := w.leaseCtx(ctx)
			ws, err := w.leases.Poke(lctx, caps)
			cancel()
			if err != nil {
				w.log.Debug("poking running caps failed", "err", err)
			}
			w.wake(ctx, ws)
		}
	}
}

// renewLeases renews the leases of every job running or waiting for a
// handler slot, in one round trip. A lease found expired is logged: its
// job runs on, but its place may be another run's.
func (w *capKeeper) renewLeases(ctx context.Context) {
	var leases []throttle.Lease
	of := map[throttle.Lease]*flight{}
	w.inflight.Range(func(k, _ any) bool {
		f := k.(*flight)
		if !f.settled.Load() {
			leases = append(leases, f.leases...)
			for _, ls := range f.leases {
				of[ls] = f
			}
		}
		return true
	})
	if len(leases) == 0 {
		return
	}
	lctx, cancel := w.leaseCtx(ctx)
	lost, err := w.leases.Renew(lctx, leases)
	cancel()
	if err != nil {
		w.log.Warn("renewing leases failed; they expire after the lease TTL unless renewed in time", "err", err)
	}
	for _, ls := range lost {
		if of[ls].settled.Load() {
			// Its job ended while the renewal was under way, and gave
			// the lease back (a job is settled before its leases go).
			continue
		}
		w.log.Warn("a running job's lease had expired; its cap may run one more job until it ends",
			"tenant", ls.Tenant)
		w.rec.add(ls.Tenant, func(s *TenantStats) { s.LeasesLost++ })
	}
}

// startLeaseLoop runs leaseLoop until stop is called, its calls under
// work; stop returns once the loop has ended. A worker has it when it has
// a Leaser.
func (w *capKeeper) startLeaseLoop(_, work context.Context) (stop func()) {
	return startLoop(func(done <-chan struct{}) { w.leaseLoop(work, done) })
}

// runTimes keeps, per running cap ("" for the fleet's), a moving mean of
// how long the jobs this worker ran under it held their leases, to foretell
// a parked job's wait. Safe for concurrent use; the zero value is ready.
type runTimes struct {
	mu sync.Mutex
	m  map[string]time.Duration
}

// maxRunTimes caps the caps remembered: past it, new ones are not.
const maxRunTimes = 100_000

// add folds one run into capKey's mean: each run weighs a fifth.
func (r *runTimes) add(capKey string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]time.Duration{}
	}
	old, ok := r.m[capKey]
	switch {
	case ok:
		r.m[capKey] = old + (d-old)/5
	case len(r.m) < maxRunTimes:
		r.m[capKey] = d
	}
}

// mean returns capKey's mean run time, if a run was seen.
func (r *runTimes) mean(capKey string) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, ok := r.m[capKey]
	return d, ok
}

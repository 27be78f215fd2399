package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/internal/app"
)

// flushTimeout bounds the flush of a worker's last acks and naks.
const flushTimeout = 5 * time.Second

// fleet is the demo's workers: each runs app.Run on its own NATS
// connection, all with the same configuration and Redis client.
type fleet struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	ready    chan struct{} // closed once every worker is built
	exited   chan struct{} // closed when the first worker returns
	exitOnce sync.Once

	mu      sync.Mutex
	workers []*consumer.Worker
	errs    []error
	n       int
}

// fleetParams is what startFleet needs.
type fleetParams struct {
	n       int
	cfg     *app.Settings
	rdb     redis.UniversalClient
	handler consumer.Handler
	log     *slog.Logger
}

// startFleet connects p.n workers to NATS and runs them until stop. The
// workers do not stop when ctx is cancelled: stop does, in order.
func startFleet(ctx context.Context, p fleetParams) (*fleet, error) {
	conns := make([]*nats.Conn, 0, p.n)
	for i := range p.n {
		nc, err := app.ConnectNATS(p.cfg.Config, fmt.Sprintf("throttler-demo-worker-%d", i+1))
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return nil, fmt.Errorf("connect worker %d to NATS: %w", i+1, err)
		}
		conns = append(conns, nc)
	}
	workCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f := &fleet{cancel: cancel, ready: make(chan struct{}), exited: make(chan struct{}), n: p.n}
	for i, nc := range conns {
		f.wg.Go(func() { f.run(workCtx, i+1, nc, p) })
	}
	return f, nil
}

// run runs worker id until workCtx is cancelled, then flushes and closes
// its connection.
func (f *fleet) run(workCtx context.Context, id int, nc *nats.Conn, p fleetParams) {
	defer nc.Close()
	defer f.exitOnce.Do(func() { close(f.exited) })
	log := p.log.With("worker", id)
	err := app.Run(workCtx, p.cfg, app.Options{
		NATS:     nc,
		Redis:    p.rdb,
		Handler:  p.handler,
		Logger:   log,
		OnWorker: f.add,
	})
	if err == nil && workCtx.Err() == nil {
		err = errors.New("stopped before the demo ended")
	}
	if ferr := nc.FlushTimeout(flushTimeout); ferr != nil {
		log.Warn("flushing NATS connection", "err", ferr)
	}
	if err != nil {
		f.mu.Lock()
		f.errs = append(f.errs, fmt.Errorf("worker %d: %w", id, err))
		f.mu.Unlock()
	}
}

// add collects a built worker; it is app.Options.OnWorker.
func (f *fleet) add(w *consumer.Worker) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.workers = append(f.workers, w)
	if len(f.workers) == f.n {
		close(f.ready)
	}
}

// deferred sums the deferrals of every worker, per tenant.
func (f *fleet) deferred() map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int64{}
	for _, w := range f.workers {
		for tenant, s := range w.Stats() {
			out[tenant] += s.Deferred
		}
	}
	return out
}

// stop cancels the workers, waits until every app.Run has returned (a
// graceful shutdown), and returns their failures.
func (f *fleet) stop() error {
	f.cancel()
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(f.errs...)
}

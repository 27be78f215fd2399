// Package httpserve serves the worker's own HTTP endpoints (the probes and
// metrics, the admin API and console) until the worker stops, and stops
// them within a bound: a connection held open by a client must not hold
// the worker's exit.
package httpserve

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Grace is how long a stop lets the requests in flight finish before it
// closes every connection still open. These endpoints answer probes,
// scrapes and short admin calls, so a request that needs longer is not
// worth keeping a stopping worker for.
const Grace = 500 * time.Millisecond

// Serve serves srv on ln in the background until the returned stop is
// called. stop closes at once the connections that have not sent a
// request, waits up to Grace for the requests in flight, then closes the
// connections left; it returns once the server has stopped. name says
// which server a failure is of in the log. Serve sets srv.ConnState,
// calling the one srv had.
func Serve(srv *http.Server, ln net.Listener, name string, log *slog.Logger) (stop func()) {
	return serve(srv, ln, name, log, Grace)
}

func serve(srv *http.Server, ln net.Listener, name string, log *slog.Logger, grace time.Duration) (stop func()) {
	fresh := newFreshConns(srv)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(name+" server failed", "addr", ln.Addr().String(), "err", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- srv.Shutdown(ctx) }()
		// net/http counts a connection that has not sent its request yet
		// as busy for 5 s, so a probe's, scraper's or browser's spare
		// connection would hold the shutdown for the whole grace. Such
		// connections are closed until the shutdown ends: one accepted
		// just before Shutdown closed the listener is caught next tick.
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		fresh.close()
		for {
			select {
			case err := <-done:
				if err != nil {
					// Shutdown leaves the connections still busy at its
					// deadline open: close them.
					_ = srv.Close()
				}
				return
			case <-tick.C:
				fresh.close()
			}
		}
	}
}

// freshConns tracks a server's connections that have not sent a request
// yet (http.StateNew).
type freshConns struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// newFreshConns tracks srv's fresh connections, through its ConnState
// hook (calling the one it had).
func newFreshConns(srv *http.Server) *freshConns {
	f := &freshConns{conns: make(map[net.Conn]struct{})}
	prev := srv.ConnState
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		f.mu.Lock()
		if s == http.StateNew {
			f.conns[c] = struct{}{}
		} else {
			delete(f.conns, c)
		}
		f.mu.Unlock()
		if prev != nil {
			prev(c, s)
		}
	}
	return f
}

// close closes every fresh connection.
func (f *freshConns) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		_ = c.Close()
		delete(f.conns, c)
	}
}

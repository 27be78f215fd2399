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
	"time"
)

// Grace is how long a stop lets the requests in flight finish before it
// closes every connection still open. These endpoints answer probes,
// scrapes and short admin calls, so a request that needs longer is not
// worth keeping a stopping worker for. It is also what a connection that
// has not sent its request yet costs: net/http counts a new connection as
// busy for 5 s, and a probe's or browser's spare connection would
// otherwise keep the shutdown waiting for the whole of its timeout.
const Grace = 500 * time.Millisecond

// Serve serves srv on ln in the background until the returned stop is
// called. stop waits up to Grace for the requests in flight, then closes
// the connections left; it returns once the server has stopped. name says
// which server a failure is of in the log.
func Serve(srv *http.Server, ln net.Listener, name string, log *slog.Logger) (stop func()) {
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(name+" server failed", "addr", ln.Addr().String(), "err", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), Grace)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			// Shutdown leaves the connections still busy at its deadline
			// open: close them.
			_ = srv.Close()
		}
	}
}

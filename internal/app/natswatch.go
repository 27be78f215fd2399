package app

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/throttler/throttler/config"
	"github.com/throttler/throttler/internal/outage"
)

// NATSWatch follows the worker's NATS connection and reports it through an
// outage.Reporter: the first failure with NATS_URL (secrets masked) and its
// cause (refused, timeout, authentication, TLS), a line when the cause
// changes, a summary every 30 s, one line when the connection is back.
type NATSWatch struct {
	// Reporter is what the watch reports to.
	Reporter *outage.Reporter
}

// NewNATSWatch returns a watch for the connection to cfg's NATS_URL that
// logs to log.
func NewNATSWatch(cfg *config.Config, log *slog.Logger) *NATSWatch {
	return &NATSWatch{Reporter: outage.New(outage.Options{Name: "NATS", Attrs: []any{"url", cfg.MaskedNATSURL()}, Log: log})}
}

// Options are the connection options that feed the watch; with them the
// client keeps trying for ever, whatever the failure. Without
// IgnoreAuthErrorAbort nats.go closes the connection for good after the
// same authentication error twice, and the worker would wait on a closed
// connection until restarted; the credentials file is read again at every
// attempt, so a fixed one is picked up.
func (w *NATSWatch) Options() []nats.Option {
	r := w.Reporter
	return []nats.Option{
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.IgnoreAuthErrorAbort(),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) { r.Fail(err) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil when the worker closes the connection itself
				r.Fail(err)
			}
		}),
		nats.ConnectHandler(func(*nats.Conn) { r.OK() }),
		nats.ReconnectHandler(func(*nats.Conn) { r.OK() }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			// Only the failures of the connection itself; a subscription's
			// errors (slow consumer, permissions) are not an outage.
			if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) ||
				strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
				r.Fail(err)
			}
		}),
	}
}

// Run ticks the reporter once a second until ctx ends, so an outage is
// summed up every 30 s. nats.go tells only the first failure of a TLS
// handshake or a login (later attempts fail silently), so Run also reads
// the connection's last error while it is down and reports a change of
// cause.
func (w *NATSWatch) Run(ctx context.Context, nc *nats.Conn) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if down, _ := w.Reporter.Down(); down && !nc.IsConnected() {
			if err := nc.LastError(); err != nil && outage.Classify(err) != w.Reporter.Cause() {
				w.Reporter.Fail(err)
			}
		}
		w.Reporter.Tick()
	}
}

package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// ErrNeedsToken refuses to serve a non-loopback address without a token.
var ErrNeedsToken = errors.New("the admin API serves an address beyond loopback only with THROTTLER_ADMIN_TOKEN")

// Listen listens on addr for the admin server. Without a token it refuses
// any address that is not loopback, judged by the address actually bound
// (so that ":8081", every interface, is refused too).
func Listen(addr, token string) (net.Listener, error) {
	if token == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("admin address %q: %w", addr, err)
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return nil, fmt.Errorf("admin address %q: %w", addr, ErrNeedsToken)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin address %q: %w", addr, err)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && token == "" && !tcp.IP.IsLoopback() {
		_ = ln.Close()
		return nil, fmt.Errorf("admin address %q bound %s: %w", addr, tcp, ErrNeedsToken)
	}
	return ln, nil
}

// Serve serves h on ln until stop is called, which shuts the server down
// within a few seconds.
func Serve(ln net.Listener, h http.Handler, log *slog.Logger) (stop func()) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin server failed", "addr", ln.Addr().String(), "err", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
}

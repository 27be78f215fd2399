package admin

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/throttler/throttler/internal/httpserve"
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
			return nil, fmt.Errorf("admin address %q (THROTTLER_ADMIN_ADDR): %w", addr, err)
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return nil, fmt.Errorf("admin address %q (THROTTLER_ADMIN_ADDR): %w", addr, ErrNeedsToken)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin address %q (THROTTLER_ADMIN_ADDR): %w", addr, err)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && token == "" && !tcp.IP.IsLoopback() {
		_ = ln.Close()
		return nil, fmt.Errorf("admin address %q (THROTTLER_ADMIN_ADDR) bound %s: %w", addr, tcp, ErrNeedsToken)
	}
	return ln, nil
}

// Serve serves h on ln until stop is called, which shuts the server down:
// the requests in flight get httpserve.Grace to finish, then every
// connection still open is closed.
func Serve(ln net.Listener, h http.Handler, log *slog.Logger) (stop func()) {
	return httpserve.Serve(&http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}, ln, "admin", log)
}

package app

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/throttler/throttler/config"
)

// A metrics address another process holds stops the start, naming the
// variable, as a busy admin address does: a worker without its probes
// would only be restarted by them.
func TestStartServerRefusesABusyMetricsAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer ln.Close()
	cfg := &Settings{Config: &config.Config{MetricsAddr: ln.Addr().String()}}
	srv, err := startServer(context.Background(), cfg, Options{}, slog.New(slog.DiscardHandler))
	if err == nil {
		srv.close()
		t.Fatalf("started serving on %s, which another listener holds", cfg.MetricsAddr)
	}
	if !strings.Contains(err.Error(), "THROTTLER_METRICS_ADDR") {
		t.Errorf("error %q does not name THROTTLER_METRICS_ADDR", err)
	}
}

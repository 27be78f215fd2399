package app

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/testenv"
)

// TestCheckRestartedTellsARestartFromAStall asks a real redis-server, up
// for a few seconds, whether it restarted: not during an outage shorter
// than its uptime (a stall, a network cut: a debug line only), and so
// during one longer (a warning that says what was lost, with its uptime).
func TestCheckRestartedTellsARestartFromAStall(t *testing.T) {
	r := testenv.StartRedis(t)
	c := r.Client(t)
	ctx := context.Background()
	testenv.Eventually(t, 10*time.Second, "the server up for 3 s", func() bool {
		up, err := uptime(ctx, c)
		return err == nil && up >= 3*time.Second
	})
	var log testenv.Buffer
	l := slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))

	checkRestarted(ctx, c, r.URL(), 0, l)
	if got := log.String(); !strings.Contains(got, `msg="Redis answers again without a restart"`) || strings.Contains(got, "level=WARN") {
		t.Fatalf("after an outage shorter than the uptime, the log says:\n%s", got)
	}
	checkRestarted(ctx, c, r.URL(), time.Hour, l)
	if got := log.String(); !strings.Contains(got, `level=WARN msg="Redis restarted while unreachable`) || !strings.Contains(got, "tenants' buckets start full again") {
		t.Fatalf("after an outage longer than the uptime, the log says:\n%s", got)
	}
}

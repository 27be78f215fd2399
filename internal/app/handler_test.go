package app

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/internal/testenv"
)

// TestHandlerLogsToTheWorkersLogger: what the HTTP handler logs (a
// Throttler-Cost that is not a cost) goes to the worker's logger, in its
// format, not to the standard library's default.
func TestHandlerLogsToTheWorkersLogger(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Throttler-Cost", "lots")
	}))
	defer srv.Close()
	cfg, err := LoadSettingsFrom(map[string]string{"THROTTLER_HANDLER": "http", "THROTTLER_HTTP_URL": srv.URL + "/{tenant}"})
	if err != nil {
		t.Fatal(err)
	}
	var logs testenv.Buffer
	h, closeHandler, err := NewHandler(nil, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer closeHandler()
	if err := h(context.Background(), consumer.Job{ID: "JOBS:1", Tenant: "acme", Subject: "jobs.acme", Cost: 1}); err != nil {
		t.Fatalf("the job failed: %v", err)
	}
	if s := logs.String(); !strings.Contains(s, "level=WARN") || !strings.Contains(s, "Throttler-Cost") || !strings.Contains(s, "tenant=acme") {
		t.Fatalf("the worker's logger got %q, want the handler's warning about Throttler-Cost for acme", s)
	}
}

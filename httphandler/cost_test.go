package httphandler

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestParseCost: Throttler-Cost is one whole number from 0 to 1e9,
// digits only.
func TestParseCost(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want int64
		ok   bool
	}{
		{[]string{"0"}, 0, true}, {[]string{"10"}, 10, true}, {[]string{"1000000000"}, 1e9, true},
		{[]string{"1000000001"}, 0, false}, {[]string{"1.5"}, 0, false}, {[]string{"-1"}, 0, false},
		{[]string{"1e3"}, 0, false}, {[]string{""}, 0, false}, {[]string{" 1"}, 0, false},
		{[]string{"1", "2"}, 0, false}, {[]string{"99999999999999999999"}, 0, false},
	} {
		got, ok := parseCost(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("parseCost(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// TestBadCostLoggedOncePerTenant: a malformed Throttler-Cost on a 2xx
// answer is not a failure, and is logged once per tenant.
func TestBadCostLoggedOncePerTenant(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set(HeaderCost, "ten")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	var logs bytes.Buffer
	h, err := New(Options{URL: srv.URL, Timeout: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	job := testJob()
	for range 3 {
		if err := h.Handle(context.Background(), job); err != nil {
			t.Fatalf("Handle with a malformed %s: %v, want nil", HeaderCost, err)
		}
	}
	job.Tenant = "globex"
	if err := h.Handle(context.Background(), job); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if n := strings.Count(logs.String(), HeaderCost); n != 2 {
		t.Fatalf("%d log lines about %s, want 2 (one per tenant):\n%s", n, HeaderCost, logs.String())
	}
}

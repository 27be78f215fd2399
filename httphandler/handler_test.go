package httphandler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/throttler/throttler/consumer"
)

// now is the fixed clock Retry-After is read against.
var now = time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)

// testJob is a job of acme with headers of its own and of NATS.
func testJob() consumer.Job {
	return consumer.Job{
		ID: "JOBS:42", Tenant: "acme", Subject: "jobs.acme.email", Data: []byte(`{"to":"x"}`),
		Header: nats.Header{
			"traceparent": {"00-abc-def-01"},
			"X-Custom":    {"a", "b"},
			"Nats-Msg-Id": {"m1"},
			"Connection":  {"close"},
			"X-Env":       {"from-job"},
		},
	}
}

// newHandler returns a Handler sending to srv's URL plus path.
func newHandler(t *testing.T, srv *httptest.Server, path string, timeout time.Duration) *Handler {
	t.Helper()
	h, err := New(Options{URL: srv.URL + path, Timeout: timeout, Headers: http.Header{"X-Env": {"prod"}, "Authorization": {"Bearer x"}},
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// serve returns a server answering every request with fn, and recording
// the requests' headers and bodies.
type recorded struct {
	mu      sync.Mutex
	headers []http.Header
	paths   []string
	bodies  []string
	methods []string
}

func serve(t *testing.T, fn http.HandlerFunc) (*httptest.Server, *recorded) {
	t.Helper()
	rec := &recorded{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.headers = append(rec.headers, r.Header.Clone())
		rec.paths = append(rec.paths, r.URL.RequestURI())
		rec.bodies = append(rec.bodies, string(b))
		rec.methods = append(rec.methods, r.Method)
		rec.mu.Unlock()
		fn(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, rec
}

// A 2xx answer is done; the request carries the job's data, its headers
// but Nats-* and hop-by-hop ones, the static headers over the job's, and
// the job's identity, to the URL rendered for the job.
func TestRequestAndSuccess(t *testing.T) {
	srv, rec := serve(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) })
	h := newHandler(t, srv, "/jobs/{tenant}?s={subject}", time.Second)
	if err := h.Handle(context.Background(), testJob()); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	got := rec.headers[0]
	want := map[string]string{
		"Traceparent": "00-abc-def-01", "X-Env": "prod", "Authorization": "Bearer x",
		"Throttler-Tenant": "acme", "Throttler-Job-Id": "JOBS:42", "Idempotency-Key": "JOBS:42",
	}
	for k, v := range want {
		if got.Get(k) != v || len(got.Values(k)) != 1 {
			t.Errorf("header %s = %q, want %q", k, got.Values(k), v)
		}
	}
	if vs := got.Values("X-Custom"); len(vs) != 2 {
		t.Errorf("X-Custom = %q, want both values", vs)
	}
	if got.Get("Nats-Msg-Id") != "" || got.Get("Connection") == "close" {
		t.Errorf("headers %v carry Nats-Msg-Id or the job's Connection", got)
	}
	if rec.bodies[0] != `{"to":"x"}` || rec.methods[0] != http.MethodPost || rec.paths[0] != "/jobs/acme?s=jobs.acme.email" {
		t.Errorf("request %s %s %q", rec.methods[0], rec.paths[0], rec.bodies[0])
	}
}

// The outcome of each kind of answer.
func TestOutcomes(t *testing.T) {
	long := strings.Repeat("x", 5000)
	tests := []struct {
		name      string
		status    int
		header    map[string]string
		body      string
		permanent bool
		until     time.Time // a RetryAfter until then when set
		contains  []string
		lacks     string
	}{
		{name: "404", status: 404, body: "no such tenant\nat all", permanent: true, contains: []string{"HTTP 404 Not Found", "no such tenant at all"}},
		{name: "400 long body", status: 400, body: long, permanent: true, contains: []string{"HTTP 400", strings.Repeat("x", 1024)}, lacks: strings.Repeat("x", 1025)},
		{name: "500", status: 500, body: "oops", contains: []string{"HTTP 500 Internal Server Error", "oops"}},
		{name: "302", status: 302, header: map[string]string{"Location": "http://elsewhere.invalid/"}, contains: []string{"HTTP 302"}},
		{name: "503 without Retry-After", status: 503, contains: []string{"HTTP 503"}},
		{name: "429 seconds", status: 429, header: map[string]string{"Retry-After": "7"}, until: now.Add(7 * time.Second)},
		{name: "429 date", status: 429, header: map[string]string{"Retry-After": now.Add(90 * time.Second).Format(http.TimeFormat)}, until: now.Add(90 * time.Second)},
		{name: "429 past date", status: 429, header: map[string]string{"Retry-After": now.Add(-time.Hour).Format(http.TimeFormat)}, until: now},
		{name: "429 without Retry-After", status: 429, until: now.Add(DefaultHold)},
		{name: "429 unreadable Retry-After", status: 429, header: map[string]string{"Retry-After": "soon"}, until: now.Add(DefaultHold)},
		{name: "503 with Retry-After", status: 503, header: map[string]string{"Retry-After": "2"}, until: now.Add(2 * time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, _ := serve(t, func(w http.ResponseWriter, _ *http.Request) {
				for k, v := range tt.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			})
			err := newHandler(t, srv, "/", time.Second).Handle(context.Background(), testJob())
			if err == nil {
				t.Fatal("Handle: nil, want an error")
			}
			var ra *consumer.RetryAfter
			isRA := errors.As(err, &ra)
			if !tt.until.IsZero() {
				if !isRA || !ra.Until.Equal(tt.until) {
					t.Fatalf("Handle: %v, want RetryAfter until %s", err, tt.until)
				}
				if !strings.Contains(ra.Reason, fmt.Sprintf("HTTP %d", tt.status)) {
					t.Errorf("reason %q lacks the status", ra.Reason)
				}
				return
			}
			if isRA || consumer.IsPermanent(err) != tt.permanent {
				t.Fatalf("Handle: %v (RetryAfter %v, permanent %v), want permanent %v", err, isRA, consumer.IsPermanent(err), tt.permanent)
			}
			for _, c := range tt.contains {
				if !strings.Contains(err.Error(), c) {
					t.Errorf("error %q lacks %q", err, c)
				}
			}
			if tt.lacks != "" && strings.Contains(err.Error(), tt.lacks) {
				t.Errorf("error quotes more than 1 KB of the body")
			}
		})
	}
}

// No answer within the timeout, or no server, is an ordinary failure.
func TestTimeoutAndConnectionErrors(t *testing.T) {
	release := make(chan struct{})
	srv, _ := serve(t, func(http.ResponseWriter, *http.Request) { <-release })
	defer close(release)
	start := time.Now()
	err := newHandler(t, srv, "/", 100*time.Millisecond).Handle(context.Background(), testJob())
	if err == nil || consumer.IsPermanent(err) || !strings.Contains(err.Error(), "no answer within 100ms") {
		t.Fatalf("Handle against a server that never answers: %v, want a timeout failure", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("took %s, want about the 100ms timeout", took)
	}

	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	h, err := New(Options{URL: dead.URL + "/u", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Handle(context.Background(), testJob()); err == nil || consumer.IsPermanent(err) {
		t.Fatalf("Handle against a closed port: %v, want a failure", err)
	}
}

// The connection is reused across requests, even after an error answer
// with a body.
func TestKeepAlive(t *testing.T) {
	var mu sync.Mutex
	conns := map[string]bool{}
	srv, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		conns[r.RemoteAddr] = true
		mu.Unlock()
		w.WriteHeader(500)
		_, _ = io.WriteString(w, strings.Repeat("e", 10_000))
	})
	h := newHandler(t, srv, "/", time.Second)
	for range 5 {
		_ = h.Handle(context.Background(), testJob())
	}
	if len(conns) != 1 {
		t.Errorf("%d connections for 5 sequential requests, want 1", len(conns))
	}
}

func TestRetryAfterParse(t *testing.T) {
	for v, want := range map[string]time.Time{
		"0":                             now,
		"120":                           now.Add(2 * time.Minute),
		"99999999999999999999":          now.Add(30 * 24 * time.Hour),
		"Wed, 02 Dec 2026 05:01:00 GMT": now.Add(time.Minute),
	} {
		if got, ok := retryAfter(v, now); !ok || !got.Equal(want) {
			t.Errorf("retryAfter(%q) = %s, %v; want %s", v, got, ok, want)
		}
	}
	for _, v := range []string{"", "-1", "1.5", "tomorrow"} {
		if _, ok := retryAfter(v, now); ok {
			t.Errorf("retryAfter(%q) read", v)
		}
	}
}

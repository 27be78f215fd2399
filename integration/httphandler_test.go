package integration

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/testenv"
)

// arrival is one request the downstream server received.
type arrival struct {
	tenant, key string
	at          time.Time
}

// TestHTTPHandlerHoldsTenantOnRetryAfter: two workers with
// THROTTLER_HANDLER=http send jobs to a server that answers acme's first
// request 429 with Retry-After: 2, and everything else 200. From then no
// worker sends another acme job for 2 s (the tenant is held fleet-wide),
// while globex's jobs go through at once; every job is delivered, the
// held one included, and the hold is counted, not a failure.
func TestHTTPHandlerHoldsTenantOnRetryAfter(t *testing.T) {
	e := setup(t)
	var (
		mu       sync.Mutex
		arrivals []arrival
		held     time.Time // when the 429 was answered
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		a := arrival{tenant: r.Header.Get("Throttler-Tenant"), key: r.Header.Get("Idempotency-Key"), at: time.Now()}
		arrivals = append(arrivals, a)
		if a.tenant == "acme" && held.IsZero() {
			held = a.at
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	snapshot := func() ([]arrival, time.Time) {
		mu.Lock()
		defer mu.Unlock()
		return append([]arrival(nil), arrivals...), held
	}

	cfg := e.config(map[string]string{
		"THROTTLER_DEFAULT_LIMIT": "1000/s",
		"THROTTLER_HANDLER":       "http",
		"THROTTLER_HTTP_URL":      srv.URL + "/jobs/{tenant}",
		"THROTTLER_HTTP_TIMEOUT":  "5s",
	})
	e.ensureStream(cfg)
	w1 := e.startWorker(cfg, nil)
	w2 := e.startWorker(cfg, nil)

	want := map[string]bool{}
	want[jobID("JOBS", e.publish("jobs.acme", nil, []byte("first")))] = true
	// Once a worker counts the hold, the tenant is held in Redis: every
	// acme job published from now on is decided under the hold, so none
	// is in flight and none may reach the server before the hold ends
	// (less 100 ms for the clocks: the worker reads Retry-After after the
	// server answered).
	testenv.Eventually(t, 10*time.Second, "the 429 counted as a downstream hold", func() bool {
		return w1.stats()["acme"].DownstreamHolds+w2.stats()["acme"].DownstreamHolds == 1
	})
	for k, v := range e.publishJobs("JOBS", "jobs.acme", nil, 10) {
		want[k] = v
	}
	for k, v := range e.publishJobs("JOBS", "jobs.globex", nil, 10) {
		want[k] = v
	}

	testenv.Eventually(t, 20*time.Second, "every job delivered with a 2xx", func() bool {
		got, _ := snapshot()
		return len(got) == len(want)+1 // the first acme job twice
	})
	got, heldAt := snapshot()
	seen := map[string]int{}
	for _, a := range got {
		seen[a.key]++
		since := a.at.Sub(heldAt)
		switch {
		case a.tenant == "acme" && since > 0 && since < 2*time.Second-100*time.Millisecond:
			t.Errorf("acme's job %s reached the server %s after the 429, within the 2s hold", a.key, since)
		case a.tenant == "globex" && since > 2*time.Second:
			t.Errorf("globex's job %s reached the server %s after acme's 429: held back by another tenant's hold", a.key, since)
		}
	}
	for k := range want {
		if seen[k] == 0 {
			t.Errorf("job %s never reached the server", k)
		}
	}
	var holds, failed int64
	for _, w := range []*worker{w1, w2} {
		s := w.stats()["acme"]
		holds += s.DownstreamHolds
		failed += s.Failed
	}
	if holds != 1 || failed != 0 {
		t.Errorf("acme: %d downstream holds and %d failures, want 1 and 0", holds, failed)
	}
}

// TestHTTPHandlerRunsTheHeldJobFirst: the job a downstream answered 429
// with Retry-After: 1 runs first when the hold ends, ahead of the acme
// jobs published during the hold, which wait for the slots after it
// (2/s: one every 500 ms from the hold's end).
func TestHTTPHandlerRunsTheHeldJobFirst(t *testing.T) {
	e := setup(t)
	var (
		mu       sync.Mutex
		arrivals []arrival
		held     bool
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		arrivals = append(arrivals, arrival{tenant: r.Header.Get("Throttler-Tenant"), key: r.Header.Get("Idempotency-Key"), at: time.Now()})
		if !held {
			held = true
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)

	cfg := e.config(map[string]string{
		"THROTTLER_DEFAULT_LIMIT": "2/s",
		"THROTTLER_HANDLER":       "http",
		"THROTTLER_HTTP_URL":      srv.URL + "/jobs/{tenant}",
		"THROTTLER_HTTP_TIMEOUT":  "5s",
	})
	e.ensureStream(cfg)
	w := e.startWorker(cfg, nil)
	first := jobID("JOBS", e.publish("jobs.acme", nil, []byte("first")))
	testenv.Eventually(t, 10*time.Second, "the 429 counted as a downstream hold", func() bool {
		return w.stats()["acme"].DownstreamHolds == 1
	})
	later := e.publishJobs("JOBS", "jobs.acme", nil, 4)
	testenv.Eventually(t, 20*time.Second, "every job delivered with a 2xx", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(arrivals) == len(later)+2 // the first job twice
	})
	mu.Lock()
	defer mu.Unlock()
	if arrivals[0].key != first || arrivals[1].key != first {
		var order []string
		for _, a := range arrivals {
			order = append(order, a.key)
		}
		t.Fatalf("arrivals %v: want the held job %s first, then again first when the hold ends", order, first)
	}
	if since := arrivals[1].at.Sub(arrivals[0].at); since < time.Second-100*time.Millisecond {
		t.Errorf("the held job came back %s after its 429, within the 1s hold", since)
	}
}

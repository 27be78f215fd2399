package integration

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// BenchmarkSettleFigure is the settle's figure: jobs of tenant acme,
// charged 1, whose endpoint answers Throttler-Cost: 10, under 100/s:100,
// with THROTTLER_HANDLER=http and a backlog of 3,000 jobs published
// before the worker starts. The admitted cost is the cost of the jobs
// that reached the endpoint in the 10 s from the first; it should be
// 100/s × 10 s + 100 = 1,100. It reports the cost and how far it is from
// 1,100, in %, with THROTTLER_MAX_DEFER at 0 (no slot reserved: a job
// over the limit is deferred uncharged) and at its default of 10m, and
// how many jobs were admitted together at the window's last admission:
// their cost was unknown then, and the bound (docs/design.md, "Settle")
// lets the cost exceed 1,100 by at most 9 for each job then open.
//
//	go test -run '^$' -bench SettleFigure -benchtime 1x -timeout 10m ./integration/
func BenchmarkSettleFigure(b *testing.B) {
	for _, horizon := range []string{"0s", "10m"} {
		b.Run("max-defer-"+horizon, func(b *testing.B) {
			for range b.N {
				cost := runSettleFigure(b, horizon)
				b.Logf("max defer %s: admitted cost %d in 10 s, %+.2f%% from 1,100", horizon, cost, 100*float64(cost-1100)/1100)
				b.ReportMetric(float64(cost), "admitted-cost")
				b.ReportMetric(100*float64(cost-1100)/1100, "off-%")
			}
		})
	}
}

// runSettleFigure runs one round of BenchmarkSettleFigure with the given
// THROTTLER_MAX_DEFER and returns the admitted cost.
func runSettleFigure(b *testing.B, horizon string) int {
	e := setup(b)
	var mu sync.Mutex
	var arrivals []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
		w.Header().Set("Throttler-Cost", "10")
		w.WriteHeader(http.StatusOK)
	}))
	b.Cleanup(srv.Close)
	cfg := e.config(map[string]string{
		"THROTTLER_DEFAULT_LIMIT": "100/s:100",
		"THROTTLER_HANDLER":       "http",
		"THROTTLER_HTTP_URL":      srv.URL + "/jobs/{tenant}",
		"THROTTLER_CONCURRENCY":   "128",
		"THROTTLER_MAX_DEFER":     horizon,
	})
	e.ensureStream(cfg)
	e.publishJobs("JOBS", "jobs.acme", nil, 3000)
	w := e.startWorker(cfg, nil)
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		n := len(arrivals)
		first := time.Time{}
		if n > 0 {
			first = arrivals[0]
		}
		mu.Unlock()
		if n > 0 && time.Since(first) > 11*time.Second {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("no job reached the endpoint within a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
	w.stop(b)
	mu.Lock()
	defer mu.Unlock()
	in := 0
	for _, a := range arrivals {
		if a.Sub(arrivals[0]) < 10*time.Second {
			in++
		}
	}
	st := w.stats()["acme"]
	// The jobs admitted together at the window's last admission (reaching
	// the endpoint within 5 ms of the last that did): the cost still
	// unknown then, which the bound leaves over 1,100 (docs/design.md,
	// "Settle": at most 9 each).
	last, together := arrivals[in-1], 0
	for _, a := range arrivals[:in] {
		if last.Sub(a) <= 5*time.Millisecond {
			together++
		}
	}
	b.Logf("%s", fmt.Sprintf("%d jobs in 10 s, the last %s after the first with %d admitted together; settled %d charged, %d refunded",
		in, last.Sub(arrivals[0]).Round(time.Millisecond), together, st.SettledCharged, st.SettledRefunded))
	b.ReportMetric(float64(together), "last-together")
	return 10 * in
}

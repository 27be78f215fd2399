package integration

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/testenv"
)

// inFlight counts, per tenant, the requests a test server is answering,
// and the most it ever answered at once.
type inFlight struct {
	mu      sync.Mutex
	now     map[string]int
	most    map[string]int
	done    map[string]int
	perKey  map[string]int
	holdFor time.Duration
}

func newInFlight(holdFor time.Duration) *inFlight {
	return &inFlight{now: map[string]int{}, most: map[string]int{}, done: map[string]int{}, perKey: map[string]int{}, holdFor: holdFor}
}

func (f *inFlight) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t := r.Header.Get("Throttler-Tenant")
	f.mu.Lock()
	f.now[t]++
	f.most[t] = max(f.most[t], f.now[t])
	f.perKey[r.Header.Get("Idempotency-Key")]++
	f.mu.Unlock()
	time.Sleep(f.holdFor)
	f.mu.Lock()
	f.now[t]--
	f.done[t]++
	f.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (f *inFlight) read(tenant string) (most, done int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.most[tenant], f.done[tenant]
}

// TestCapInProcess: two in-process workers, acme capped at running:3 and
// 60 jobs of 100 ms: acme never has more than 3 requests in flight, every
// job is answered once, and globex, uncapped, runs beside it.
func TestCapInProcess(t *testing.T) {
	e := setup(t)
	srv := newInFlight(100 * time.Millisecond)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	cfg := e.config(map[string]string{
		"THROTTLER_DEFAULT_LIMIT": "1000/s",
		"THROTTLER_TENANT_LIMITS": "acme=running:3",
		"THROTTLER_HANDLER":       "http",
		"THROTTLER_HTTP_URL":      hs.URL + "/jobs/{tenant}",
		"THROTTLER_HTTP_TIMEOUT":  "5s",
	})
	e.ensureStream(cfg)
	w1 := e.startWorker(cfg, nil)
	w2 := e.startWorker(cfg, nil)
	acme := e.publishJobs("JOBS", "jobs.acme", nil, 60)
	globex := e.publishJobs("JOBS", "jobs.globex", nil, 20)
	testenv.Eventually(t, 30*time.Second, "every job answered", func() bool {
		_, a := srv.read("acme")
		_, g := srv.read("globex")
		return a >= len(acme) && g >= len(globex)
	})
	if most, _ := srv.read("acme"); most > 3 || most < 3 {
		t.Errorf("acme had at most %d in flight, want exactly 3 at the peak", most)
	}
	if most, _ := srv.read("globex"); most <= 3 {
		t.Errorf("globex had at most %d in flight: held to acme's cap?", most)
	}
	srv.mu.Lock()
	for k, n := range srv.perKey {
		if n != 1 {
			t.Errorf("job %s answered %d times", k, n)
		}
	}
	srv.mu.Unlock()
	var parked, woken int64
	for _, w := range []*worker{w1, w2} {
		s := w.stats()["acme"]
		parked += s.CapDeferred
		woken += s.Woken
	}
	t.Logf("acme: %d parked, %d woken", parked, woken)
	if parked == 0 || woken == 0 {
		t.Errorf("acme: %d parked, %d woken; want both", parked, woken)
	}
}

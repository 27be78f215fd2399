package integration

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/testenv"
)

// probe GETs path from the worker's HTTP server at addr and returns the
// status code and body; code 0 when it could not be asked.
func probe(t testing.TB, addr, path string) (code int, body string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err.Error()
	}
	return resp.StatusCode, string(b)
}

// startServedWorker starts a worker configured with vars that serves
// /healthz, /readyz and /metrics on a free port, and returns its address
// once /readyz first answers 200.
func (e *env) startServedWorker(vars map[string]string) (addr string, w *worker) {
	e.t.Helper()
	addr = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(e.t))
	all := map[string]string{"THROTTLER_METRICS_ADDR": addr}
	for k, v := range vars {
		all[k] = v
	}
	cfg := e.config(all)
	e.ensureStream(cfg)
	w = e.startWorker(cfg, nil)
	e.waitReady(addr, "the worker to be ready")
	return addr, w
}

// waitReady waits until /readyz at addr answers 200.
func (e *env) waitReady(addr, what string) {
	e.t.Helper()
	var body string
	testenv.Eventually(e.t, 20*time.Second, what, func() bool {
		var code int
		code, body = probe(e.t, addr, "/readyz")
		return code == http.StatusOK
	})
	if !strings.HasPrefix(body, "ok") {
		e.t.Errorf("/readyz answered 200 with %q, want ok", body)
	}
}

// waitNotReady waits until /readyz at addr answers 503 with a body that
// contains want.
func (e *env) waitNotReady(addr, want string) {
	e.t.Helper()
	var code int
	var body string
	defer func() {
		if e.t.Failed() {
			e.t.Logf("last /readyz: %d %q", code, body)
		}
	}()
	testenv.Eventually(e.t, 20*time.Second, "/readyz to answer 503 naming "+want, func() bool {
		code, body = probe(e.t, addr, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, want)
	})
	e.t.Logf("/readyz: %d %q", code, body)
}

// TestReadyzFollowsNATS: /readyz answers 503 while NATS is away, and 200
// again once it is back; /healthz answers 200 throughout, since the worker
// rides out the outage by itself.
func TestReadyzFollowsNATS(t *testing.T) {
	e := setup(t)
	addr, _ := e.startServedWorker(nil)

	e.nats.Shutdown(t)
	e.waitNotReady(addr, "nats")
	if code, body := probe(t, addr, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz with NATS away: %d %q, want 200", code, body)
	}
	e.nats.Restart(t)
	e.waitReady(addr, "/readyz to answer 200 once NATS is back")
}

// TestReadyzFollowsRedis: under the default policy (defer), /readyz
// answers 503 while Redis is away, and 200 again once it is back.
func TestReadyzFollowsRedis(t *testing.T) {
	e := setup(t)
	addr, _ := e.startServedWorker(nil)

	e.redis.Stop(t)
	e.waitNotReady(addr, "redis")
	if code, body := probe(t, addr, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz with Redis away: %d %q, want 200", code, body)
	}
	e.redis.Start(t)
	e.waitReady(addr, "/readyz to answer 200 once Redis is back")
}

// TestReadyzRedisAllowed: with THROTTLER_ON_REDIS_ERROR=allow the worker
// runs jobs without Redis, so /readyz keeps answering 200 while Redis is
// away, noting it: every answer until the note shows is 200, and so is
// the one that shows it.
func TestReadyzRedisAllowed(t *testing.T) {
	e := setup(t)
	addr, _ := e.startServedWorker(map[string]string{"THROTTLER_ON_REDIS_ERROR": "allow"})

	e.redis.Stop(t)
	testenv.Eventually(t, 20*time.Second, "/readyz to note that Redis is away", func() bool {
		code, body := probe(t, addr, "/readyz")
		if code != http.StatusOK {
			t.Fatalf("/readyz with Redis away under allow: %d %q, want 200", code, body)
		}
		return strings.Contains(body, "redis") && strings.Contains(body, "allow")
	})
	// Jobs still run, as the readiness says.
	out := e.collect("done.*")
	e.publish("jobs.acme", nil, []byte("x"))
	out.waitCount(t, 1, 20*time.Second)
}

// TestMetricsHistograms: after jobs ran, some deferred, /metrics has the
// four histograms with observations (the throttle wait of the deferred
// jobs once they ran, measured from their publish), no tenant label on
// them, the Go and process collectors, and the per-tenant counters under
// their old names, but for counters a tenant never used.
func TestMetricsHistograms(t *testing.T) {
	e := setup(t)
	// slow's second and third jobs are deferred, for a second and two.
	addr, w := e.startServedWorker(map[string]string{"THROTTLER_DEFAULT_LIMIT": "1000/s", "THROTTLER_TENANT_LIMITS": "slow=1/s:1"})
	out := e.collect("done.*")
	for range 3 {
		e.publish("jobs.acme", nil, []byte("x"))
		e.publish("jobs.slow", nil, []byte("x"))
	}
	out.waitCount(t, 6, 20*time.Second)
	w.waitCompleted(t, "acme", 3)
	w.waitCompleted(t, "slow", 3)
	if d := w.stats()["slow"].Deferred; d < 2 {
		t.Fatalf("slow's jobs deferred %d times, want at least 2", d)
	}

	m, err := scrape(addr)
	must(t, err, "metrics")
	for _, h := range []string{"decision_duration", "queue_wait", "handler_duration", "throttle_wait"} {
		name := "throttler_" + h + "_seconds_count"
		min := 6.0 // jobs run
		switch h {
		case "decision_duration":
			min = 1 // at least one batch
		case "throttle_wait":
			min = 2
		}
		if m[name] < min {
			t.Errorf("%s = %v, want at least %v", name, m[name], min)
		}
	}
	if wait := m[`throttler_throttle_wait_seconds_bucket{le="0.5"}`]; wait != 0 {
		t.Errorf("%v throttle waits under 0.5 s, want none (slow's deferred jobs wait a second or more)", wait)
	}
	for _, name := range []string{
		`throttler_completed_total{tenant="acme"}`, `throttler_deferred_total{tenant="slow"}`, "throttler_held_jobs",
		"go_goroutines", "process_resident_memory_bytes",
	} {
		if _, ok := m[name]; !ok {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	for _, name := range []string{`throttler_shadow_limited_total{tenant="acme"}`, `throttler_bad_limits_total{tenant="acme"}`,
		`throttler_deferred_total{tenant="acme"}`} {
		if _, ok := m[name]; ok {
			t.Errorf("/metrics has %s, a counter acme never used", name)
		}
	}
	if m[`throttler_completed_total{tenant="acme"}`] != 3 || m["go_goroutines"] <= 0 || m["process_resident_memory_bytes"] <= 0 {
		t.Errorf("completed %v, goroutines %v, resident memory %v: want 3 and more than 0",
			m[`throttler_completed_total{tenant="acme"}`], m["go_goroutines"], m["process_resident_memory_bytes"])
	}
	for name := range m {
		if strings.Contains(name, "_seconds_bucket{") && strings.Contains(name, "tenant=") {
			t.Errorf("a histogram has a tenant label: %s", name)
		}
	}
}

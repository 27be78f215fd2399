package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	dto "github.com/prometheus/client_model/go"

	"github.com/throttler/throttler/internal/ops"
	"github.com/throttler/throttler/internal/testenv"
)

// TestPrometheusLive: a real Prometheus (Debian's, as scripts/test.sh
// installs it) scrapes two workers, run in process with the ConfigMap's
// settings, under traffic with waits, caps, holds, failures and dead
// letters. Every dashboard query returns data, every rule evaluates
// without error, the waiting jobs it stores match what the servers hold,
// and a worker's /metrics serves every metric the rules and panels
// select (but Prometheus' own up) and passes promtool's check.
func TestPrometheusLive(t *testing.T) {
	t.Parallel()
	f := startLiveFleet(t, 0)
	testenv.Eventually(t, 30*time.Second, "prometheus to scrape both workers ready", func() bool {
		return f.scalar(t, `sum(throttler_ready{job="throttler"})`) == 2
	})

	f.publish(t, tenantSlow, 30, nil)
	f.publish(t, tenantCapped, 20, nil)
	f.publish(t, tenantHeld, 6, nil)
	f.publish(t, tenantFailing, 3, nil)
	f.publish(t, "acme", 2, nats.Header{"Job-Cost": []string{"abc"}}) // dead-lettered: not a cost
	// The fast tenant's steady flow, for rates and the handler histogram.
	defer f.publishEvery(t, tenantFast, 100*time.Millisecond)()

	// Every dashboard query finds data.
	queries := dashboardQueries(t)
	empty := map[string]bool{}
	testenv.Eventually(t, 60*time.Second, "every dashboard query to return data", func() bool {
		clear(empty)
		for _, q := range queries {
			if len(f.query(t, q.expr).Data.Result) == 0 {
				empty[q.where] = true
			}
		}
		return len(empty) == 0
	})
	if len(empty) > 0 {
		t.Errorf("queries without data: %v", empty)
	}

	// Every rule evaluated, without error.
	testenv.Eventually(t, 20*time.Second, "every rule to evaluate without error", func() bool {
		return checkRules(t, f.prom, false)
	})
	checkRules(t, f.prom, true)

	// The waiting jobs match what the servers hold: the slow tenant's
	// moved jobs, the capped tenant's waiting list.
	ctx := context.Background()
	var direct, stored [2]float64
	testenv.Eventually(t, 30*time.Second, "throttler_waiting_jobs to match the servers' counts", func() bool {
		moved, err := ops.WaitingFor(ctx, f.js, f.cfg.Stream, f.cfg.Schedules, tenantSlow)
		if err != nil {
			t.Fatal(err)
		}
		snap, err := f.limiter.Peek(ctx, tenantCapped, time.Time{})
		if err != nil || snap.Cap == nil {
			t.Fatalf("peek %s: %+v, %v", tenantCapped, snap, err)
		}
		direct = [2]float64{float64(moved), float64(snap.Cap.Waiting)}
		stored = [2]float64{f.scalar(t, `max(throttler_waiting_jobs{job="throttler",kind="scheduled"})`),
			f.scalar(t, `max(throttler_waiting_jobs{job="throttler",kind="parked"})`)}
		return direct == stored && direct[0] > 20 && direct[1] > 10
	})
	t.Logf("waiting jobs: scheduled %v, parked %v (servers: %v)", stored[0], stored[1], direct)

	// What the workers serve: every metric used (one worker may not have
	// run a capped job, so the names are those of both), passing
	// promtool's check.
	exported := map[string]*dto.MetricFamily{}
	for _, w := range f.workers {
		resp, err := http.Get("http://" + w + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		families := parseMetrics(t, body)
		// docs/operations.md, "Metrics and cardinality": 8 series per
		// tenant at most, by default.
		perTenant := map[string]int{}
		for _, fam := range families {
			for _, m := range fam.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "tenant" {
						perTenant[l.GetValue()]++
					}
				}
			}
		}
		for tenant, n := range perTenant {
			if n > 8 {
				t.Errorf("worker %s serves %d series of tenant %s, want at most 8", w, n, tenant)
			}
		}
		t.Logf("worker %s: series per tenant %v", w, perTenant)
		for name, fam := range families {
			if exported[name] == nil || name == "throttler_ready" || name == "throttler_max_ack_pending" {
				exported[name] = fam // the gauges checked are each worker's one series
			}
		}
		check := exec.Command(promtool(t), "check", "metrics")
		check.Stdin = bytes.NewReader(body)
		if out, err := check.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics of %s: %v\n%s", w, err, out)
		}
	}
	checkExported(t, exported)
}

// rulesResponse is Prometheus' /api/v1/rules answer.
type rulesResponse struct {
	Data struct {
		Groups []struct {
			Rules []struct {
				Name           string    `json:"name"`
				Health         string    `json:"health"`
				LastError      string    `json:"lastError"`
				LastEvaluation time.Time `json:"lastEvaluation"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"data"`
}

// checkRules reports whether every rule was evaluated and is healthy;
// report fails t for each that is not.
func checkRules(t *testing.T, prom string, report bool) bool {
	t.Helper()
	resp, err := http.Get(prom + "/api/v1/rules")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rr rulesResponse
	if err := json.NewDecoder(resp.Body).Decode(&rr); err != nil {
		t.Fatal(err)
	}
	ok, n := true, 0
	for _, g := range rr.Data.Groups {
		for _, r := range g.Rules {
			n++
			if r.Health != "ok" || r.LastError != "" || r.LastEvaluation.IsZero() {
				ok = false
				if report {
					t.Errorf("rule %s: health %q, error %q, evaluated at %v", r.Name, r.Health, r.LastError, r.LastEvaluation)
				}
			}
		}
	}
	if want := len(ruleQueries(t)); n != want {
		ok = false
		if report {
			t.Errorf("prometheus has %d rules, want alerts.yaml's %d", n, want)
		}
	}
	return ok
}

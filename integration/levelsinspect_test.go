package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/internal/testenv"
)

// TestInspectNamesTheLevelHoldingJobs: under a global 1/s:1, a worker
// parks most of acme's 20 jobs to wait for their turn under _global.
// inspect acme names _global as holding them, with their count, and
// inspect --global shows them queued there, acme first in line; the
// counts fall as the jobs are called.
func TestInspectNamesTheLevelHoldingJobs(t *testing.T) {
	e := setup(t)
	bin := buildThrottler(t)
	env := map[string]string{"THROTTLER_GLOBAL_LIMIT": "1/s:1", "THROTTLER_DEFAULT_LIMIT": "1000/s"}
	vars := map[string]string{"NATS_URL": e.natsURL, "REDIS_URL": e.redis.URL()}
	for k, v := range env {
		vars[k] = v
	}
	cfg := e.config(env)
	w := e.startWorker(cfg, func(context.Context, consumer.Job) error { return nil })
	defer w.stop(t)
	e.waitBuilt(w)
	e.publishJobs(cfg.Stream, "jobs.acme.send", nil, 20)
	type hold struct {
		Level  string   `json:"level"`
		Jobs   jobCount `json:"jobs"`
		Queued int64    `json:"queued"`
	}
	var in struct {
		Levels *struct {
			Global  string `json:"global"`
			Holding []hold `json:"holding"`
		} `json:"levels"`
	}
	testenv.Eventually(t, 20*time.Second, "inspect acme: its jobs held by _global", func() bool {
		status, out, errOut := runCLI(t, bin, vars, "inspect", "acme", "--json")
		if status != 0 || json.Unmarshal([]byte(out), &in) != nil {
			t.Fatalf("inspect acme --json: status %d\n%s\n%s", status, out, errOut)
		}
		return in.Levels != nil && len(in.Levels.Holding) == 1 && in.Levels.Holding[0].Jobs.N >= 10
	})
	h := in.Levels.Holding[0]
	if in.Levels.Global != "1/s:1" || h.Level != "_global" || !h.Jobs.Exact || h.Queued != int64(h.Jobs.N) {
		t.Fatalf("inspect acme: levels %+v; want the global 1/s:1 holding acme's jobs, all of the list's, exact", in.Levels)
	}
	_, out, _ := runCLI(t, bin, vars, "inspect", "acme")
	for _, want := range []string{"limits above it: _global 1/s:1 from THROTTLER_GLOBAL_LIMIT", "held by _global: ", " of its jobs wait there for a turn (exact)"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect acme:\n%s\nwant %q", out, want)
		}
	}
	var lv struct {
		Queued     int64 `json:"queued"`
		Flows      int   `json:"flows_waiting"`
		NextInLine []struct {
			Tenant string `json:"tenant"`
			Jobs   int    `json:"jobs"`
		} `json:"next_in_line"`
		Source struct {
			Where string `json:"where"`
		} `json:"source"`
	}
	status, out, errOut := runCLI(t, bin, vars, "inspect", "--global", "--json")
	if status != 0 || json.Unmarshal([]byte(out), &lv) != nil {
		t.Fatalf("inspect --global --json: status %d\n%s\n%s", status, out, errOut)
	}
	if lv.Queued < 1 || lv.Queued > int64(h.Jobs.N) || lv.Flows != 1 || len(lv.NextInLine) != 1 || lv.NextInLine[0].Tenant != "acme" ||
		lv.Source.Where != "THROTTLER_GLOBAL_LIMIT" {
		t.Fatalf("inspect --global: %+v; want at most acme's %d jobs queued, acme alone in line, the limit from THROTTLER_GLOBAL_LIMIT", lv, h.Jobs.N)
	}
	// Called one a second, the list shortens.
	testenv.Eventually(t, 20*time.Second, "inspect --global: fewer jobs queued as they are called", func() bool {
		var later struct {
			Queued int64 `json:"queued"`
		}
		_, out, _ := runCLI(t, bin, vars, "inspect", "--global", "--json")
		return json.Unmarshal([]byte(out), &later) == nil && later.Queued < lv.Queued
	})
}

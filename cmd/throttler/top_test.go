package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/testenv"
)

// `top --json` prints one JSON document: an array of the tenants' rows,
// as every command's --json prints a list, the totals on stderr.
func TestTopJSONIsAnArrayOfRows(t *testing.T) {
	setup(t)
	t.Setenv("THROTTLER_TENANT_LIMITS", "acme=1/m:1")
	worker := startChild(t)
	testenv.Eventually(t, 30*time.Second, "the worker running", func() bool {
		return strings.Contains(worker.stderr.String(), "worker running")
	})
	cli(t, "pub", "--quiet", "-n", "3", "jobs.acme.x", "job {n}").want(t, "pub", exitOK, nil, nil)
	var rows []map[string]any
	var last result
	testenv.Eventually(t, 30*time.Second, "acme's jobs waiting in top", func() bool {
		last = cli(t, "top", "--quiet", "--json")
		if last.code != exitOK || json.Unmarshal([]byte(last.stdout), &rows) != nil {
			return false
		}
		for _, r := range rows {
			if r["tenant"] == "acme" && r["moved"].(float64)+r["nakd"].(float64) >= 2 {
				return true
			}
		}
		return false
	})
	if !strings.Contains(last.stderr, "1 worker, ") || !strings.Contains(last.stderr, "more than shown") {
		t.Errorf("stderr %q, want the workers that answered and the tenants left out", last.stderr)
	}
	if code := worker.stop(t); code != exitOK {
		t.Fatalf("worker exit %d", code)
	}
}

// TestTopWithoutWorkersSaysSo: with NATS up and no worker, top says that
// no worker answered and what to check, once prefixed: --json exits 1,
// the live view keeps retrying with the same words. Before, NATS's "no
// responders" reply came out as "throttler top: top: empty top reply".
func TestTopWithoutWorkersSaysSo(t *testing.T) {
	setup(t)
	const said = "no worker answered on _THROTTLER.JOBS.throttler.top: is a worker running on this NATS, with the same THROTTLER_STREAM (JOBS) and THROTTLER_CONSUMER (throttler)?"
	r := cli(t, "top", "--quiet", "--json")
	r.want(t, "top --json without workers", exitFailed, nil, []string{"throttler top: " + said})
	if strings.Contains(r.stderr, "top: top:") || strings.Contains(r.stderr, "empty top reply") {
		t.Errorf("top --json without workers: stderr %q", r.stderr)
	}
	live := startChild(t, "top", "--quiet")
	testenv.Eventually(t, 30*time.Second, "the live view saying no worker answered", func() bool {
		return strings.Contains(live.stderr.String(), "throttler top: "+said+" (retrying)")
	})
	if code := live.stop(t); code != exitOK {
		t.Fatalf("top exit %d:\n%s", code, live.stderr)
	}
}

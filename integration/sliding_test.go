package integration

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSlidingWindowEndToEnd runs jobs through a worker whose tenants are
// limited by a sliding window, sets one with `throttler limits set`, and
// reads it back with `throttler inspect`: 15 jobs under sliding:5/1s run
// in three groups of 5, a second apart, all of them, each once.
func TestSlidingWindowEndToEnd(t *testing.T) {
	e := setup(t)
	spec := "sliding:5/1s"
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": spec})
	e.ensureStream(cfg)
	e.startWorker(cfg, nil)
	out := e.collect("done.*")
	want := map[string]bool{}
	for range 15 {
		want[jobID("JOBS", e.publish("jobs.acme", nil, []byte("x")))] = true
	}
	got := out.waitCount(t, 15, 30*time.Second)
	var at []time.Time
	for _, m := range got {
		if !want[m.jobID] {
			t.Fatalf("unexpected or duplicate forward %q", m.jobID)
		}
		delete(want, m.jobID)
		at = append(at, m.at)
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	if span := at[len(at)-1].Sub(at[0]); span < 1800*time.Millisecond {
		t.Fatalf("15 jobs under %s forwarded within %s, want about 2 s", spec, span)
	}
	// Forwards arrive a little after their slots; 800 ms leaves room for it.
	for i := range at {
		n := 0
		for _, b := range at[i:] {
			if b.Sub(at[i]) < 800*time.Millisecond {
				n++
			}
		}
		if n > 5 {
			t.Fatalf("%d jobs forwarded within 800 ms of job %d under %s", n, i, spec)
		}
	}

	bin := buildThrottler(t)
	vars := map[string]string{"NATS_URL": e.natsURL, "REDIS_URL": e.redis.URL(), "THROTTLER_DEFAULT_LIMIT": spec}
	if status, stdout, stderr := runCLI(t, bin, vars, "limits", "set", "globex", "10/s+sliding:3/m"); status != 0 {
		t.Fatalf("limits set a sliding window: status %d\n%s\n%s", status, stdout, stderr)
	}
	status, raw, stderr := runCLI(t, bin, vars, "inspect", "acme", "--json", "--quiet")
	var in struct {
		Limits  string `json:"limits"`
		Buckets []struct {
			Limit   string `json:"limit"`
			Sliding bool   `json:"sliding"`
			Burst   int64  `json:"burst"`
		} `json:"buckets"`
	}
	if status != 0 || json.Unmarshal([]byte(raw), &in) != nil {
		t.Fatalf("inspect --json: status %d\n%s\n%s", status, raw, stderr)
	}
	if in.Limits != "sliding:5/s" || len(in.Buckets) != 1 || !in.Buckets[0].Sliding || in.Buckets[0].Limit != "sliding:5/s" || in.Buckets[0].Burst != 5 {
		t.Fatalf("inspect acme --json: %s", raw)
	}
	_, text, _ := runCLI(t, bin, vars, "inspect", "globex", "--quiet")
	if !strings.Contains(text, "sliding:3/m") || !strings.Contains(text, "0 of 3 in the span") {
		t.Fatalf("inspect globex:\n%s", text)
	}
	t.Logf("inspect globex:\n%s", text)
}

package integration

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCalendarWindowEndToEnd runs jobs through a worker whose tenants are
// limited by a calendar window, sets one with `throttler limits set`, and
// reads it back with `throttler inspect`: 15 jobs published at once under
// window:5/s run in three consecutive calendar seconds, 5 in each, none
// before its second starts, all of them, each once.
func TestCalendarWindowEndToEnd(t *testing.T) {
	e := setup(t)
	spec := "window:5/s"
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": spec})
	e.ensureStream(cfg)
	e.startWorker(cfg, nil)
	out := e.collect("done.*")
	rdb := e.redis.Client(t)
	key := cfg.KeyPrefix + ":{acme}:c:s@UTC"
	// Publish just after a second starts, so that the 15 are decided
	// within it.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(1100 * time.Millisecond)))
	start := time.Now().Truncate(time.Second)
	want := map[string]bool{}
	for range 15 {
		want[jobID("JOBS", e.publish("jobs.acme", nil, []byte("x")))] = true
	}
	// The counts by window start, once every job is decided (a job back
	// at its slot is not counted again; the hash lives until the last
	// window holding a count ends).
	var counts map[string]string
	deadline := time.Now().Add(10 * time.Second)
	for sum := 0; sum < 15 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		counts, sum = rdb.HGetAll(context.Background(), key).Val(), 0
		for _, n := range counts {
			v, _ := strconv.Atoi(n)
			sum += v
		}
	}
	var starts []int64
	for s, n := range counts {
		if n != "5" {
			t.Fatalf("counts by window %v: want 5 in each", counts)
		}
		v, _ := strconv.ParseInt(s, 10, 64)
		starts = append(starts, v)
	}
	slices.Sort(starts)
	if len(starts) != 3 || starts[1]-starts[0] != 1e6 || starts[2]-starts[1] != 1e6 {
		t.Fatalf("counts by window %v: want 5 in each of three consecutive seconds", counts)
	}
	first := time.UnixMicro(starts[0])
	if first.Before(start) {
		t.Fatalf("the first window %s starts before the jobs were published at %s", first, start)
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
	// Job i, in the order forwarded, runs in window i/5 or later: never
	// before that second starts (forwards arrive a little after).
	for i, a := range at {
		if w := first.Add(time.Duration(i/5) * time.Second); a.Before(w) {
			t.Fatalf("job %d forwarded at %s, before its second %s starts", i, a.Format(time.RFC3339Nano), w.Format(time.RFC3339Nano))
		}
	}
	if last := at[len(at)-1]; last.Sub(first) > 4*time.Second {
		t.Fatalf("the last job forwarded at %s, want in the third second from %s", last, first)
	}
	time.Sleep(50 * time.Millisecond)
	if extra := len(out.all()); extra != 15 {
		t.Fatalf("%d forwards, want 15", extra)
	}

	bin := buildThrottler(t)
	vars := map[string]string{"NATS_URL": e.natsURL, "REDIS_URL": e.redis.URL(), "THROTTLER_DEFAULT_LIMIT": spec}
	if status, stdout, stderr := runCLI(t, bin, vars, "limits", "set", "globex", "10/s+window:3/d@Europe/Paris"); status != 0 {
		t.Fatalf("limits set a calendar window: status %d\n%s\n%s", status, stdout, stderr)
	}
	// One job of acme in a window of its own, then its count in inspect.
	e.publish("jobs.acme", nil, []byte("x"))
	out.waitCount(t, 16, 10*time.Second)
	status, raw, stderr := runCLI(t, bin, vars, "inspect", "acme", "--json", "--quiet")
	var in struct {
		Limits  string `json:"limits"`
		Buckets []struct {
			Limit    string     `json:"limit"`
			Calendar bool       `json:"calendar"`
			InWindow int64      `json:"in_window"`
			Burst    int64      `json:"burst"`
			ResetsAt *time.Time `json:"resets_at"`
		} `json:"buckets"`
	}
	if status != 0 || json.Unmarshal([]byte(raw), &in) != nil {
		t.Fatalf("inspect --json: status %d\n%s\n%s", status, raw, stderr)
	}
	if in.Limits != spec || len(in.Buckets) != 1 || !in.Buckets[0].Calendar || in.Buckets[0].Limit != spec || in.Buckets[0].Burst != 5 || in.Buckets[0].ResetsAt == nil {
		t.Fatalf("inspect acme --json: %s", raw)
	}
	t.Logf("inspect acme --json (its count is 1 within the second of its job, 0 after): %s", raw)
	// globex: three jobs in its day, the third its last; inspect shows
	// the count and when the day in Paris ends.
	for range 3 {
		e.publish("jobs.globex", nil, []byte("x"))
	}
	out.waitCount(t, 19, 10*time.Second)
	_, text, _ := runCLI(t, bin, vars, "inspect", "globex", "--quiet")
	paris, _ := time.LoadLocation("Europe/Paris")
	y, m, d := time.Now().In(paris).Date()
	midnight := time.Date(y, m, d+1, 0, 0, 0, 0, paris).UTC().Format(time.RFC3339)
	if !strings.Contains(text, "window:3/d@Europe/Paris") || !strings.Contains(text, "3 counted in the window of 3") || !strings.Contains(text, midnight) {
		t.Fatalf("inspect globex, want 3 counted, resetting at %s:\n%s", midnight, text)
	}
	t.Logf("inspect globex:\n%s", text)
}

// TestCalendarDeadLetterEndToEnd runs jobs under window:2/h:dlq: two run,
// the others are dead-lettered with the window and its reset time, each
// job once, nothing reserved.
func TestCalendarDeadLetterEndToEnd(t *testing.T) {
	e := setup(t)
	if left := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)); left < 20*time.Second {
		time.Sleep(left + time.Second) // all four in one hour
	}
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "window:2/h:dlq"})
	e.ensureStream(cfg)
	e.startWorker(cfg, nil)
	dlq, done := e.collect("dlq.*"), e.collect("done.*")
	for range 4 {
		e.publish("jobs.acme", nil, []byte("x"))
	}
	dead := dlq.waitCount(t, 2, 20*time.Second)
	done.waitCount(t, 2, 20*time.Second)
	reset := time.Now().UTC().Truncate(time.Hour).Add(time.Hour).Format(time.RFC3339)
	for _, m := range dead {
		if m.tenant != "acme" || !strings.Contains(m.reason, "over window:2/h:dlq") || !strings.Contains(m.reason, "resets at "+reset) {
			t.Fatalf("dead letter %s with reason %q, want the window and its reset at %s", m.subject, m.reason, reset)
		}
	}
	time.Sleep(500 * time.Millisecond)
	if n, m := len(dlq.all()), len(done.all()); n != 2 || m != 2 {
		t.Fatalf("%d dead-lettered, %d run: want 2 and 2", n, m)
	}
}

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/internal/testenv"
)

// runCLI runs the binary with vars and args, and returns its exit status,
// stdout and stderr.
func runCLI(t *testing.T, bin string, vars map[string]string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd, stdout, stderr := throttlerCmd(ctx, bin, vars, args...)
	err := cmd.Run()
	status := 0
	if err != nil {
		var exit interface{ ExitCode() int }
		if !errors.As(err, &exit) {
			t.Fatalf("%v: %v", args, err)
		}
		status = exit.ExitCode()
	}
	return status, stdout.String(), stderr.String()
}

// redisDump returns every key of the test's Redis with its DUMP and
// whether it has a TTL.
func (e *env) redisDump() map[string]string {
	e.t.Helper()
	ctx := context.Background()
	rdb := e.redis.Client(e.t)
	keys, err := rdb.Keys(ctx, "*").Result()
	must(e.t, err, "KEYS")
	out := map[string]string{}
	for _, k := range keys {
		d, err := rdb.Dump(ctx, k).Result()
		must(e.t, err, "DUMP %s", k)
		ttl, err := rdb.PTTL(ctx, k).Result()
		must(e.t, err, "PTTL %s", k)
		out[k] = fmt.Sprintf("%q ttl=%v", d, ttl > 0)
	}
	return out
}

// jobCount is a count of inspect's JSON.
type jobCount struct {
	N     int  `json:"n"`
	Exact bool `json:"exact"`
}

// TestLimitsCLIAndInspect drives `throttler limits` and `throttler
// inspect` as an operator would, against a scenario with known numbers:
// acme limited to 5 at once and 1 a minute is sent 25 jobs; initech's
// handler fails.
func TestLimitsCLIAndInspect(t *testing.T) {
	e := setup(t)
	bin := buildThrottler(t)
	vars := map[string]string{
		"NATS_URL":                e.natsURL,
		"REDIS_URL":               e.redis.URL(),
		"THROTTLER_TENANT_LIMITS": "globex=5/s",
	}
	cli := func(wantStatus int, args ...string) string {
		t.Helper()
		status, out, errOut := runCLI(t, bin, vars, args...)
		if status != wantStatus {
			t.Fatalf("throttler %s: status %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), status, wantStatus, out, errOut)
		}
		return out + errOut
	}

	// Bad input is refused with status 2, before anything is written.
	if out := cli(2, "limits", "set", "acme", "10/s+lots"); !strings.Contains(out, "10/s+lots") {
		t.Fatalf("a bad spec: %q, want it named", out)
	}
	cli(2, "limits", "set", "a.b", "5/s")
	cli(2, "limits", "get")
	cli(2, "inspect")
	if out := cli(0, "limits", "get", "acme"); !strings.Contains(out, "acme: 100/s:100 from THROTTLER_DEFAULT_LIMIT") {
		t.Fatalf("limits get before any set: %q", out)
	}

	cli(0, "limits", "set", "acme", "1/m:5+100/h")
	if out := cli(0, "limits", "get", "acme"); !strings.Contains(out, "acme: 1/m:5+100/h:100 from bucket (revision 1,") {
		t.Fatalf("limits get: %q", out)
	}
	if out := cli(0, "limits", "list"); !strings.Contains(out, "acme      1/m:5+100/h:100  bucket (revision 1)") ||
		!strings.Contains(out, "globex    5/s:5            THROTTLER_TENANT_LIMITS") {
		t.Fatalf("limits list:\n%s", out)
	}

	// Slots may lie an hour ahead: all 20 jobs over the burst get one.
	cfg := e.config(map[string]string{"THROTTLER_TENANT_LIMITS": "globex=5/s", "THROTTLER_MAX_FAILURES": "50", "THROTTLER_MAX_DEFER": "1h"})
	w := e.startWorker(cfg, func(_ context.Context, job consumer.Job) error {
		if job.Tenant == "initech" {
			return errors.New("initech is down")
		}
		return nil
	})
	e.waitBuilt(w)
	e.publishJobs(cfg.Stream, "jobs.acme.report", nil, 25)
	e.publishJobs(cfg.Stream, "jobs.initech.x", nil, 1)
	testenv.Eventually(t, 20*time.Second, "acme's 20 jobs moved, initech's failure counted", func() bool {
		s := w.stats()
		return s["acme"].Moved == 20 && s["initech"].Failed >= 1
	})
	w.stop(t)

	before := e.redisDump()
	var in struct {
		Limits  string `json:"limits"`
		Source  struct{ Where string }
		Buckets []struct {
			Limit         string
			Tokens        float64
			ReservedUntil *time.Time `json:"reserved_until"`
		}
		WaitSeconds float64 `json:"wait_seconds"`
		Binding     string  `json:"held_by"`
		Jobs        struct {
			Moved    jobCount `json:"moved"`
			Reserved jobCount `json:"holding_slots"`
			Naked    jobCount `json:"nakd"`
		}
	}
	raw := cli(0, "inspect", "acme", "--json", "--quiet")
	if err := json.Unmarshal([]byte(raw), &in); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, raw)
	}
	if after := e.redisDump(); !reflect.DeepEqual(before, after) {
		t.Fatalf("inspect changed Redis:\nbefore %v\nafter  %v", before, after)
	}
	t.Logf("inspect acme: %s", raw)
	// 5 ran, 20 hold slots a minute apart: the per-minute bucket is 20 in
	// debt, and a new job waits about 21 minutes; the hourly one gave 25.
	b := in.Buckets
	if in.Limits != "1/m:5+100/h:100" || in.Source.Where != "bucket" || len(b) != 2 ||
		b[0].Tokens > -19.5 || b[0].Tokens < -20 || b[0].ReservedUntil == nil ||
		b[1].Tokens < 75 || b[1].Tokens > 75.5 ||
		in.WaitSeconds < 20*60 || in.WaitSeconds > 21*60 || in.Binding != "1/m:5" {
		t.Fatalf("inspect acme: %+v", in)
	}
	j := in.Jobs
	if j.Reserved.N != 20 || !j.Reserved.Exact || j.Moved.N != 20 || !j.Moved.Exact || j.Naked.N != 0 || j.Naked.Exact {
		t.Fatalf("inspect acme's jobs: %+v, want 20 holding slots and 20 moved (exact), 0 NAK'd (estimate)", j)
	}
	out := cli(0, "inspect", "initech", "--quiet")
	if !regexp.MustCompile(`handler failures in the last 24 h, by job \(kept a day after a job's last failure, even once it has run\):\n  JOBS:\d+ failed \d+ times\n$`).MatchString(out) {
		t.Fatalf("inspect initech:\n%s", out)
	}
	if after := e.redisDump(); !reflect.DeepEqual(before, after) {
		t.Fatalf("inspect changed Redis")
	}

	// Removing acme's key gives it the environment's default again, and
	// the history shows both.
	if out := cli(0, "limits", "rm", "acme"); !strings.Contains(out, "acme: 100/s:100 from THROTTLER_DEFAULT_LIMIT") {
		t.Fatalf("limits rm: %q", out)
	}
	out = cli(0, "limits", "history", "acme")
	if !strings.Contains(out, "put        1/m:5+100/h") || !strings.Contains(out, "delete     -") {
		t.Fatalf("limits history:\n%s", out)
	}
}

// TestInspectShowsCaps: with acme capped at running:2 and the fleet at 3,
// two of acme's five jobs run (their handler blocks) and three wait:
// inspect says so, and that a new job would wait for a lease. limits set
// refuses a cap where the environment's workers forward, by default or
// said outright.
func TestInspectShowsCaps(t *testing.T) {
	e := setup(t)
	bin := buildThrottler(t)
	env := map[string]string{
		"THROTTLER_TENANT_LIMITS": "acme=running:2",
		"THROTTLER_MAX_RUNNING":   "3",
		"THROTTLER_HANDLER":       "http",
		"THROTTLER_HTTP_URL":      "http://127.0.0.1:9/unused",
	}
	vars := map[string]string{"NATS_URL": e.natsURL, "REDIS_URL": e.redis.URL()}
	for k, v := range env {
		vars[k] = v
	}
	release := make(chan struct{})
	cfg := e.config(env)
	w := e.startWorker(cfg, func(ctx context.Context, _ consumer.Job) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	defer func() { close(release); w.stop(t) }()
	e.waitBuilt(w)
	e.publishJobs(cfg.Stream, "jobs.acme.export", nil, 5)
	var in struct {
		Running       int64 `json:"running_cap"`
		Cap           struct{ Running, Called, Waiting int }
		MaxRunning    int64                                  `json:"max_running"`
		Fleet         struct{ Running, Called, Waiting int } `json:"fleet_cap"`
		WaitsForLease bool                                   `json:"waits_for_lease"`
	}
	// The jobs the fleet's cap held first are woken by its room, and then
	// held by acme's: all three end up in acme's list.
	testenv.Eventually(t, 20*time.Second, "inspect: two of acme's jobs running, three waiting for acme's cap", func() bool {
		status, out, errOut := runCLI(t, bin, vars, "inspect", "acme", "--json")
		if status != 0 || json.Unmarshal([]byte(out), &in) != nil {
			t.Fatalf("inspect --json: status %d\n%s\n%s", status, out, errOut)
		}
		// A job the fleet's cap admits holds a fleet lease for a moment,
		// until acme's cap holds it back: wait for that to settle too.
		return in.Cap.Running == 2 && in.Cap.Waiting == 3 && in.Fleet.Running == 2
	})
	if in.Running != 2 || in.MaxRunning != 3 || in.Fleet.Running != 2 || in.Fleet.Waiting != 0 || !in.WaitsForLease {
		t.Fatalf("inspect acme: %+v, want a cap of 2, 2 of the fleet's 3 running, none waiting for it, a new job waiting for a lease", in)
	}
	_, out, _ := runCLI(t, bin, vars, "inspect", "acme")
	for _, want := range []string{"a job arriving now waits for a lease of running cap 2", "running cap 2: 2 running, 0 called back to run, 3 waiting",
		"THROTTLER_MAX_RUNNING=3, all tenants: 2 running"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect acme:\n%s\nwant %q", out, want)
		}
	}

	forward := map[string]string{"NATS_URL": e.natsURL, "REDIS_URL": e.redis.URL(), "THROTTLER_HANDLER": "forward"}
	if status, _, errOut := runCLI(t, bin, forward, "limits", "set", "globex", "running:2"); status != 2 || !strings.Contains(errOut, "THROTTLER_HANDLER=http") {
		t.Errorf("limits set of a cap with THROTTLER_HANDLER=forward: status %d, %q; want 2 naming the handler", status, errOut)
	}
	// The default is forward: the workers of this environment would
	// ignore the value too.
	delete(forward, "THROTTLER_HANDLER")
	if status, _, errOut := runCLI(t, bin, forward, "limits", "set", "globex", "running:2"); status != 2 || !strings.Contains(errOut, "nothing written") {
		t.Errorf("limits set of a cap, handler left to its default: status %d, %q; want 2, nothing written", status, errOut)
	}
}

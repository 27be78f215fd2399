package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	inspectpkg "github.com/throttler/throttler/internal/inspect"
	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/limits"
	"github.com/throttler/throttler/pause"
	"github.com/throttler/throttler/throttle"
)

// TestInspectShowsTheLimitsTheWorkersApply stores a running cap for a
// tenant of a fleet that forwards: inspect shows the latest good value,
// the one the workers apply, and marks the stored one with the reason.
func TestInspectShowsTheLimitsTheWorkersApply(t *testing.T) {
	s := setup(t)
	cli(t, "limits", "set", "globex", "5/m").want(t, "set 5/m", exitOK, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(s.nats.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := limits.OpenBucket(ctx, js, "throttler_limits", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.PutString(ctx, "globex", "running:2"); err != nil {
		t.Fatal(err)
	}
	cli(t, "inspect", "globex").want(t, "inspect", exitOK, []string{
		"limits 5/m:5 from bucket (revision 1",
		`not applied: globex's value "running:2" (revision 2) is ignored by the workers: running:N needs THROTTLER_HANDLER=http`,
		"5/m:5  ",
	}, nil)
}

// TestInspectTellsANeverSeenTenant inspects a tenant that left no trace:
// it says so, with the rule; once a job of it is stored, it does not.
func TestInspectTellsANeverSeenTenant(t *testing.T) {
	s := setup(t)
	cli(t, "inspect", "acme").want(t, "inspect a tenant never seen", exitOK, []string{"never seen: no bucket state", "Check the spelling"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(s.nats.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "jobs.acme.email", []byte("x")); err != nil {
		t.Fatal(err)
	}
	r := cli(t, "inspect", "acme", "--json")
	var in inspectpkg.Report
	if err := json.Unmarshal([]byte(r.stdout), &in); err != nil || r.code != exitOK {
		t.Fatalf("inspect --json: exit %d, %v\n%s\n%s", r.code, err, r.stdout, r.stderr)
	}
	if in.StoredJobs != 1 || len(in.Seen) != 1 || !strings.Contains(in.Seen[0], "1 jobs in stream JOBS") {
		t.Fatalf("acme with a stored job: stored %d, seen %q; want 1 and the job as its trace", in.StoredJobs, in.Seen)
	}
	if strings.Contains(cli(t, "inspect", "acme").stdout, "never seen") {
		t.Fatal("a tenant with a stored job is called never seen")
	}
}

// TestCommandsSayWhichServersTheyUse checks that limits and inspect name
// on stderr the NATS and Redis they use and where each comes from, with
// passwords masked, and that --quiet leaves that out.
func TestCommandsSayWhichServersTheyUse(t *testing.T) {
	s := setup(t)
	withPassword := strings.Replace(s.redis.URL(), "redis://", "redis://default:hunter2@", 1)
	t.Setenv("REDIS_URL", withPassword)
	masked := strings.Replace(withPassword, "hunter2", "****", 1)
	// The test's Redis has no password: AUTH fails, and the line is
	// printed before it.
	r := cli(t, "inspect", "acme")
	r.want(t, "inspect", r.code, nil, []string{"throttler: NATS " + s.nats.URL() + " (from NATS_URL)", "throttler: Redis " + masked + " (from REDIS_URL)"})
	if strings.Contains(r.stderr, "hunter2") {
		t.Fatalf("the password is printed:\n%s", r.stderr)
	}
	t.Setenv("REDIS_URL", s.redis.URL())
	r = cli(t, "limits", "list")
	r.want(t, "limits list", exitOK, nil, []string{"throttler: NATS " + s.nats.URL() + " (from NATS_URL)"})
	if strings.Contains(r.stderr, "Redis") {
		t.Fatalf("limits names a Redis it does not use:\n%s", r.stderr)
	}
	// sub's line is read by TestSubPrintsWhatComesOut.
	for _, args := range [][]string{{"dlq", "list"}, {"purge", "acme"}, {"pub", "jobs.acme.x"}} {
		r := cli(t, args...)
		r.want(t, strings.Join(args, " "), r.code, nil, []string{"throttler: NATS " + s.nats.URL() + " (from NATS_URL)"})
		if uses := strings.Contains(r.stderr, "throttler: Redis "); uses != (args[0] == "purge") {
			t.Fatalf("%v names a Redis: %v, want it only for purge:\n%s", args, uses, r.stderr)
		}
	}
	if r := cli(t, "limits", "list", "--quiet"); r.code != exitOK || r.stderr != "" {
		t.Fatalf("limits list --quiet: exit %d, stderr %q; want 0 and nothing", r.code, r.stderr)
	}
	// Unset, the default: said so (announce alone, as the command would
	// then talk to the machine's own NATS).
	t.Setenv("NATS_URL", "")
	cfg, ok := loadConfig(io.Discard)
	if !ok {
		t.Fatal("the test's environment does not load")
	}
	var b strings.Builder
	announce(&b, false, cfg.Config, uses{nats: true})
	if want := "throttler: NATS nats://127.0.0.1:4222 (NATS_URL is unset: the default)\n"; b.String() != want {
		t.Fatalf("announce with NATS_URL unset: %q, want %q", b.String(), want)
	}
}

// TestInspectShowsSettleDebt: acme at 10/s:1 runs j0 and reserves slots
// for j1, j2 and j3; j0 then reports a cost of 51 for its 1. inspect
// shows the debt: its bucket 50 tokens below the slots, in debt about
// 5.3 s, and the three reserved jobs to run 5 s later than their slots.
func TestInspectShowsSettleDebt(t *testing.T) {
	s := setup(t)
	t.Setenv("THROTTLER_DEFAULT_LIMIT", "10/s:1")
	t.Setenv("THROTTLER_KEY_PREFIX", "thr")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lim, err := throttle.New(s.redis.Client(t), throttle.Options{Prefix: "thr", Horizon: 10 * time.Minute,
		Policies: throttle.Rules{Default: throttle.Enforce(throttle.PerSecond(10, 1))}})
	if err != nil {
		t.Fatal(err)
	}
	caps, err := throttle.NewRunningCaps(lim, throttle.CapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dec, err := throttle.NewDecider(lim, caps)
	if err != nil {
		t.Fatal(err)
	}
	cli(t, "inspect", "acme").want(t, "inspect before any debt", exitOK, []string{"IN DEBT UNTIL"}, nil)
	// The debt is dated from the first decision, so its bounds are read
	// from the clock around the decisions, not from inspect's time, which
	// a busy machine delays.
	t0 := time.Now()
	for i, want := range []throttle.Outcome{throttle.Admitted, throttle.Reserved, throttle.Reserved, throttle.Reserved} {
		cp := throttle.Copy{Request: throttle.Request{Tenant: "acme", JobID: fmt.Sprint("j", i)}, Incarnation: int64(i + 1), Fresh: true}
		if d, err := dec.Decide(ctx, cp); err != nil || d.Outcome != want {
			t.Fatalf("j%d: %+v, %v; want %v", i, d, err, want)
		}
	}
	if r := cli(t, "inspect", "acme"); r.code != exitOK || strings.Contains(r.stdout, "debt from settled cost") {
		t.Fatalf("inspect before the settle: exit %d, a debt from settled cost shown:\n%s", r.code, r.stdout)
	}
	out, err := lim.Settle(ctx, throttle.Settlement{Tenant: "acme", JobID: "j0", Charged: 1, Cost: 51})
	if err != nil || out.Shift != 5*time.Second {
		t.Fatalf("settle: %+v, %v; want a shift of 5s", out, err)
	}
	t1 := time.Now()
	cli(t, "inspect", "acme").want(t, "inspect after the settle", exitOK, []string{
		"debt from settled cost: reserved jobs run up to 5s later than their slots (3 of them, moved when they come back; exact); buckets in debt until ",
		"all the debts together moved the slots reserved before them 5s",
	}, nil)
	r := cli(t, "inspect", "acme", "--json")
	var in inspectpkg.Report
	if err := json.Unmarshal([]byte(r.stdout), &in); err != nil || r.code != exitOK {
		t.Fatalf("inspect --json: exit %d, %v\n%s\n%s", r.code, err, r.stdout, r.stderr)
	}
	d, b := in.Debt, in.Buckets
	if d == nil || d.PendingJobs != 3 || d.LaterSeconds != 5 || d.ShiftSeconds != 5 || d.InDebtUntil == nil || len(b) != 1 ||
		b[0].ReservedUntil == nil || !b[0].ReservedUntil.Equal(*d.InDebtUntil) || !slices.Contains(in.Seen, "the shift of a settled debt") {
		t.Fatalf("inspect --json after the settle: debt %+v, buckets %+v, seen %q\n%s", d, b, in.Seen, r.stdout)
	}
	// In debt until the three slots after j0 (0.3 s) and the 50 tokens
	// settled (5 s) are paid, from j0's decision; the bucket is that far
	// below zero at 10 tokens a second when inspect read it.
	until, owed := *d.InDebtUntil, 10*d.InDebtUntil.Sub(in.At).Seconds()
	if until.Before(t0.Add(5300*time.Millisecond-10*time.Millisecond)) || until.After(t1.Add(5300*time.Millisecond+10*time.Millisecond)) ||
		math.Abs(b[0].Tokens+owed) > 0.5 {
		t.Fatalf("inspect --json after the settle: in debt until %s, %.3fs after the decisions began (want 5.3 s, from %s to %s after), tokens %.2f (want %.2f)",
			until, until.Sub(t0).Seconds(), 5300*time.Millisecond, t1.Sub(t0)+5300*time.Millisecond, b[0].Tokens, -owed)
	}
}

// TestATenantStartingWithADash: such a tenant is valid, and given after
// "--" it is read as one, not refused as an unknown flag.
func TestATenantStartingWithADash(t *testing.T) {
	setup(t)
	cli(t, "limits", "set", "--", "-acme", "5/s").want(t, "limits set -- -acme", exitOK, []string{"-acme: 5/s"}, nil)
	cli(t, "limits", "get", "--", "-acme").want(t, "limits get -- -acme", exitOK, []string{"-acme: 5/s"}, nil)
	cli(t, "inspect", "--", "-acme").want(t, "inspect -- -acme", exitOK, []string{"tenant -acme at", "limits 5/s"}, nil)
	cli(t, "credits", "get", "--", "-acme").want(t, "credits get -- -acme", exitOK, []string{"-acme: "}, nil)
	cli(t, "inspect", "-acme").want(t, "inspect -acme", exitConfig, nil, []string{"flag provided but not defined: -acme"})
}

// TestInspectSaysHowAPauseEnds: a pause without an end lasts until
// `throttler resume`; one with an end says so, and that a resume ends it
// sooner.
func TestInspectSaysHowAPauseEnds(t *testing.T) {
	since := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		until time.Time
		want  string
	}{
		{time.Time{}, "PAUSED until resumed: incident (since 2026-12-06T09:00:00Z, revision 3): no worker starts its jobs; they wait off the consumer, uncharged, until `throttler resume acme`\n"},
		{since.Add(time.Hour), "PAUSED until 2026-12-06T10:00:00Z: incident (since 2026-12-06T09:00:00Z, revision 3): no worker starts its jobs; they wait off the consumer, uncharged, until the pause ends, or `throttler resume acme` before\n"},
	} {
		var out strings.Builder
		printInspection(&out, inspectpkg.Report{Tenant: "acme", At: since, Paused: &inspectpkg.Paused{
			Pause:  pause.Pause{Tenant: "acme", Reason: "incident", Since: since, Until: c.until, Revision: 3},
			Active: true,
		}})
		if !strings.Contains(out.String(), c.want) {
			t.Errorf("inspect of a pause until %v printed\n%s\nwant the line\n%s", c.until, out.String(), c.want)
		}
	}
}

// TestCommandsSayRedisIsUnreachable: inspect and credits, with nothing
// listening at REDIS_URL, say that Redis is unreachable at that URL
// before go-redis's cause.
func TestCommandsSayRedisIsUnreachable(t *testing.T) {
	setup(t)
	url := "redis://127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	t.Setenv("REDIS_URL", url)
	for _, args := range [][]string{{"inspect", "acme"}, {"credits", "get", "acme"}} {
		r := cli(t, args...)
		want := "redis at " + url + " (REDIS_URL) is unreachable: "
		if r.code != exitFailed || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "connection refused") {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant %d and %q with the cause", args, r.code, r.stderr, exitFailed, want)
		}
	}
}

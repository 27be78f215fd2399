package main

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	inspectpkg "github.com/throttler/throttler/internal/inspect"
	"github.com/throttler/throttler/limits"
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

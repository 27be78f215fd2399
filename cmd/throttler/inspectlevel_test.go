package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	inspectpkg "github.com/throttler/throttler/internal/inspect"
	"github.com/throttler/throttler/throttle"
)

// TestInspectShowsTheLevels queues acme's jobs under a global 1/s:1 (five
// of six) and under group org-1 (two of three), as the workers would:
// inspect --global and --group show each level's policy, where it comes
// from, its bucket and the jobs waiting there; inspect acme names both
// levels as holding its jobs, with their counts, and the limits above it.
func TestInspectShowsTheLevels(t *testing.T) {
	s := setup(t)
	t.Setenv("THROTTLER_KEY_PREFIX", "thr")
	t.Setenv("THROTTLER_GLOBAL_LIMIT", "1/s:1")
	t.Setenv("THROTTLER_GROUP_FROM", "header:Org")
	t.Setenv("THROTTLER_GROUP_LIMITS", "org-1=1/s:1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lim, err := throttle.New(s.redis.Client(t), throttle.Options{Prefix: "thr", Horizon: 10 * time.Minute,
		Policies: throttle.Rules{Default: throttle.Enforce(throttle.PerSecond(100, 100))}})
	if err != nil {
		t.Fatal(err)
	}
	one := throttle.Enforce(throttle.PerSecond(1, 1))
	shared, err := throttle.NewShared(lim, throttle.LevelRules{GlobalPolicy: one, Groups: map[string]throttle.Policy{"org-1": one}}, throttle.SharedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	org := throttle.Level{Group: "org-1"}
	queue := func(lv throttle.Level, from, n int) int {
		levels := make([]throttle.Level, n)
		js := make([]throttle.LevelJob, n)
		for i := range js {
			levels[i] = lv
			js[i] = throttle.LevelJob{Tenant: "acme", JobID: fmt.Sprint("j", from+i), Flow: "acme", Cost: 1, Weight: 1}
		}
		ds, errs, _ := shared.Decide(ctx, levels, js)
		queued := 0
		for i, d := range ds {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if !d.Passed {
				queued++
			}
		}
		return queued
	}
	if q := queue(throttle.Global, 0, 6); q != 5 {
		t.Fatalf("%d of 6 jobs queued under the global 1/s:1, want 5", q)
	}
	if q := queue(org, 100, 3); q != 2 {
		t.Fatalf("%d of 3 jobs queued under org-1's 1/s:1, want 2", q)
	}

	cli(t, "inspect", "--global").want(t, "inspect --global", exitOK, []string{
		"level _global at ",
		"limits 1/s:1 from THROTTLER_GLOBAL_LIMIT, enforced",
		"1/s:1  ",
		"its terms make a job arriving now wait ",
		"jobs waiting for a turn: 5 (exact), of 1 flow (tenants, or the groups of jobs with one)",
		"next in line, by tenant among the first 5 jobs: acme 5",
		"slots granted and not yet used: 0, 0 of them still to come (exact)",
	}, nil)
	r := cli(t, "inspect", "--global", "--json")
	var lv inspectpkg.LevelReport
	if err := json.Unmarshal([]byte(r.stdout), &lv); err != nil || r.code != exitOK {
		t.Fatalf("inspect --global --json: exit %d, %v\n%s\n%s", r.code, err, r.stdout, r.stderr)
	}
	if lv.Level != "_global" || lv.Source.Where != "THROTTLER_GLOBAL_LIMIT" || lv.Queued != 5 || lv.Flows != 1 || !lv.FlowsExact ||
		!slices.Equal(lv.NextInLine, []throttle.TenantJobs{{Tenant: "acme", Jobs: 5}}) || len(lv.Buckets) != 1 || lv.Buckets[0].Tokens >= 1 || lv.WaitSeconds <= 0 {
		t.Fatalf("inspect --global --json: %+v", lv)
	}

	cli(t, "limits", "set", "--group", "org-1", "2/s:2").want(t, "limits set --group", exitOK, nil, nil)
	cli(t, "inspect", "--group", "org-1").want(t, "inspect --group org-1", exitOK, []string{
		"level group.org-1 at ",
		"limits 2/s:2 from bucket (revision 1",
		"jobs waiting for a turn: 2 (exact), of 1 flow (tenants)",
	}, nil)
	cli(t, "inspect", "--group", "org-2").want(t, "inspect --group org-2", exitOK, []string{
		"limits none (no limit: its jobs pass it) from THROTTLER_DEFAULT_GROUP_LIMIT",
		"jobs waiting for a turn: 0 (exact), of 0 flows",
	}, nil)

	cli(t, "inspect", "acme").want(t, "inspect acme", exitOK, []string{
		"limits above it: _global 1/s:1 from THROTTLER_GLOBAL_LIMIT; groups: per job (THROTTLER_GROUP_FROM=header:Org), see throttler inspect --group NAME",
		"held by _global: 5 of its jobs wait there for a turn (exact); 0 of the 5 jobs in line are called before its first",
		"held by group.org-1: 2 of its jobs wait there for a turn (exact)",
		"a job arriving now passes its own limits at once (exact); 5 of its jobs wait for a turn under _global",
	}, nil)
	r = cli(t, "inspect", "acme", "--json")
	var in inspectpkg.Report
	if err := json.Unmarshal([]byte(r.stdout), &in); err != nil || r.code != exitOK {
		t.Fatalf("inspect acme --json: exit %d, %v\n%s\n%s", r.code, err, r.stdout, r.stderr)
	}
	want := []inspectpkg.LevelQueue{
		{Level: "_global", Jobs: inspectpkg.Count{N: 5, Exact: true}, Queued: 5},
		{Level: "group.org-1", Jobs: inspectpkg.Count{N: 2, Exact: true}, Queued: 2},
	}
	if l := in.Levels; l == nil || l.Global != "1/s:1" || l.GlobalSource == nil || l.GlobalSource.Where != "THROTTLER_GLOBAL_LIMIT" ||
		l.GroupFrom != "header:Org" || !slices.Equal(l.Queues, want) || !slices.Contains(in.Seen, "jobs waiting for a turn under a shared limit") {
		t.Fatalf("inspect acme --json: levels %+v, seen %q; want the global limit, groups by header, and holding %+v", in.Levels, in.Seen, want)
	}
	// Another tenant's jobs are held by no level; it still sees the limits above it.
	r = cli(t, "inspect", "globex")
	r.want(t, "inspect globex", exitOK, []string{"limits above it: _global 1/s:1"}, nil)
	if contains(r.stdout, "held by _global") {
		t.Fatalf("inspect globex names a level holding its jobs:\n%s", r.stdout)
	}
}

// TestInspectLevelArguments: a bad group name, --global with a tenant,
// or both flags, exit 2 before anything is read or connected.
func TestInspectLevelArguments(t *testing.T) {
	t.Setenv("THROTTLER_MAX_ACK_PENDING", "not-a-number") // read, it would exit 2 naming it
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"inspect", "--group", "org.1"}, "malformed group"},
		{[]string{"inspect", "--group"}, "usage: throttler inspect"},
		{[]string{"inspect", "--global", "acme"}, "usage: throttler inspect"},
		{[]string{"inspect", "--global", "--group", "org-1"}, "usage: throttler inspect"},
	} {
		r := cli(t, c.args...)
		r.want(t, fmt.Sprint(c.args), exitConfig, nil, []string{c.want})
		if contains(r.stderr, "THROTTLER_MAX_ACK_PENDING") || contains(r.stderr, "throttler: NATS") {
			t.Errorf("%v read the environment or connected:\n%s", c.args, r.stderr)
		}
	}
}

package app

import (
	"context"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/limits"
	"github.com/throttler/throttler/tenant"
	"github.com/throttler/throttler/throttle"
)

// Unset, the limits above the tenant are none, and jobs have no group.
func TestLevelSettingsDefaults(t *testing.T) {
	t.Parallel()
	s := mustSettle(t, nil)
	if len(s.Levels.Global().Limits) != 0 || len(s.Levels.Group("org-1").Limits) != 0 || len(s.Levels.Groups) != 0 {
		t.Errorf("Levels = %+v, want no limit above the tenant", s.Levels)
	}
	if s.GroupFrom != (tenant.Source{}) {
		t.Errorf("GroupFrom = %+v, want none", s.GroupFrom)
	}
}

// The levels' specs are read as a tenant's, the default burst with them;
// a group without an entry takes the default group's; THROTTLER_SHADOW
// shadows them all.
func TestLevelSettings(t *testing.T) {
	t.Parallel()
	s := mustSettle(t, map[string]string{
		"THROTTLER_GLOBAL_LIMIT":        "500/s",
		"THROTTLER_DEFAULT_BURST":       "1000",
		"THROTTLER_GROUP_FROM":          "header:X-Org",
		"THROTTLER_GROUP_LIMITS":        "org-1=1000/s:1500, org-2=200/s+window:10000/d",
		"THROTTLER_DEFAULT_GROUP_LIMIT": "50/s:50",
		"THROTTLER_TENANT_LIMITS":       "acme=5/s+weight:3",
	})
	if s.GroupFrom != tenant.FromHeader("X-Org") {
		t.Errorf("GroupFrom = %+v, want header X-Org", s.GroupFrom)
	}
	for name, c := range map[string]struct {
		got  throttle.Policy
		want string
	}{
		"global":  {s.Levels.Global(), "500/s:1000"},
		"org-1":   {s.Levels.Group("org-1"), "1000/s:1500"},
		"org-2":   {s.Levels.Group("org-2"), "200/s:1000+window:10000/d"},
		"default": {s.Levels.Group("org-3"), "50/s:50"},
	} {
		if c.got.String() != c.want {
			t.Errorf("%s level %q, want %q", name, c.got, c.want)
		}
	}
	if w := s.Rules.Policy("acme").Weight; w != 3 {
		t.Errorf("acme's weight %d, want 3", w)
	}

	s = mustSettle(t, map[string]string{"THROTTLER_SHADOW": "true", "THROTTLER_GLOBAL_LIMIT": "500/s",
		"THROTTLER_GROUP_FROM": "subject:2", "THROTTLER_GROUP_LIMITS": "org-1=5/s"})
	if !s.Levels.Global().Shadow || !s.Levels.Group("org-1").Shadow || s.GroupFrom != tenant.FromSubject(2) {
		t.Errorf("with THROTTLER_SHADOW: Levels %+v, GroupFrom %+v; want every level in shadow mode", s.Levels, s.GroupFrom)
	}
	if p := s.Levels.Group("org-2"); len(p.Limits) != 0 {
		t.Errorf("a group without a limit: %+v, want none (shadow changes nothing there)", p)
	}
	if !reflect.DeepEqual(mustSettle(t, map[string]string{"THROTTLER_GLOBAL_LIMIT": " "}).Levels.GlobalPolicy, throttle.Policy{}) {
		t.Error("a blank THROTTLER_GLOBAL_LIMIT is a limit, want none")
	}
}

// A level's bad spec, a tenant's term in it, a bad group name or a group
// token the subjects lack is one problem naming its variable.
func TestLevelSettingsProblems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, val, want string
	}{
		{"THROTTLER_GLOBAL_LIMIT", "100", "RATE/UNIT"},
		{"THROTTLER_GLOBAL_LIMIT", "0/s", "rate"},
		{"THROTTLER_GLOBAL_LIMIT", "5/s+running:2", "running:N: a tenant's terms"},
		{"THROTTLER_GLOBAL_LIMIT", "5/s+credits", "credits"},
		{"THROTTLER_GLOBAL_LIMIT", "5/s+weight:2", "weight:N"},
		{"THROTTLER_DEFAULT_GROUP_LIMIT", "5/fortnight", "rate and window terms"},
		{"THROTTLER_DEFAULT_GROUP_LIMIT", "5/s+running:1", "a tenant's terms"},
		{"THROTTLER_DEFAULT_GROUP_LIMIT", "weight:2", "weight:N: a tenant's terms"},
		{"THROTTLER_GLOBAL_LIMIT", "running:3", "running:N: a tenant's terms"},
		{"THROTTLER_GROUP_LIMITS", "org.1=5/s", "letters, digits, _ or -"},
		{"THROTTLER_GROUP_LIMITS", "org-1=5/x", `group "org-1"`},
		{"THROTTLER_GROUP_LIMITS", "org-1=5/s+weight:4", "weight:N"},
		{"THROTTLER_GROUP_FROM", "subject:3", `"jobs.*" in THROTTLER_SUBJECTS has only 2 tokens`},
	}
	for _, tt := range tests {
		t.Run(tt.name+"="+tt.val, func(t *testing.T) {
			t.Parallel()
			vars := map[string]string{"THROTTLER_SUBJECTS": "jobs.*", "THROTTLER_GROUP_FROM": "header:Org", tt.name: tt.val}
			_, err := LoadSettingsFrom(vars)
			got := problems(t, err)
			if len(got) != 1 || !strings.HasPrefix(got[0], tt.name+": ") || !strings.Contains(got[0], tt.want) {
				t.Fatalf("LoadSettingsFrom(%v) problems %q; want one of %s mentioning %q", vars, got, tt.name, tt.want)
			}
		})
	}
}

// The worker reads each job's group where the settings say, and
// dead-letters a job without one only when THROTTLER_GROUP_REQUIRED.
func TestWorkerConfigGroup(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	wc := WorkerConfig(mustSettle(t, nil), log)
	if wc.Group != (tenant.Source{}) || wc.GroupRequired {
		t.Errorf("by default the worker reads group %+v, required %v; want none", wc.Group, wc.GroupRequired)
	}
	wc = WorkerConfig(mustSettle(t, map[string]string{"THROTTLER_GROUP_FROM": "header:X-Org", "THROTTLER_GROUP_REQUIRED": "true"}), log)
	if wc.Group != tenant.FromHeader("X-Org") || !wc.GroupRequired {
		t.Errorf("the worker reads group %+v, required %v; want header X-Org, required", wc.Group, wc.GroupRequired)
	}
}

// The worker's levels are the limits bucket's _global and group keys over
// the environment's, and the environment's alone with the bucket off; a
// bad level value is counted as a bad tenant value is.
func TestLivePoliciesLevels(t *testing.T) {
	t.Parallel()
	n := testenv.StartNATS(t, "")
	r := testenv.StartRedis(t)
	nc := n.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	vars := map[string]string{"THROTTLER_GLOBAL_LIMIT": "500/s", "THROTTLER_GROUP_FROM": "header:Org",
		"THROTTLER_GROUP_LIMITS": "org-1=100/s,org-2=60/s", "THROTTLER_DEFAULT_GROUP_LIMIT": "10/s"}
	cfg := mustSettle(t, vars)
	kv, err := limits.OpenBucket(ctx, js, cfg.LimitsBucket, 1)
	if err != nil {
		t.Fatal(err)
	}
	for key, value := range map[string]string{"_global": "250/s", "group.org-1": "40/s", "group.org-2": "60/s+running:1"} {
		if _, err := kv.PutString(ctx, key, value); err != nil {
			t.Fatal(err)
		}
	}
	stats := consumer.NewStats(100)
	tenants, levels := livePolicies(ctx, nc, js, r.Client(t), cfg, 1, stats, nil, slog.New(slog.DiscardHandler))
	if tenants == nil || levels == nil {
		t.Fatal("livePolicies returned no policies")
	}
	for name, c := range map[string]struct {
		got  throttle.Policy
		want string
	}{
		"global": {levels.Global(), "250/s:250"},
		"org-1":  {levels.Group("org-1"), "40/s:40"},
		"org-2":  {levels.Group("org-2"), "60/s:60"},
		"org-3":  {levels.Group("org-3"), "10/s:10"},
	} {
		if c.got.String() != c.want {
			t.Errorf("live %s level %q, want %q", name, c.got, c.want)
		}
	}
	if bad := stats.Snapshot()["group.org-2"].BadLimits; bad != 1 {
		t.Errorf("group.org-2's bad value counted %d times, want 1", bad)
	}

	vars["THROTTLER_LIMITS_BUCKET"] = "off"
	if _, levels := livePolicies(ctx, nc, js, r.Client(t), mustSettle(t, vars), 1, stats, nil, slog.New(slog.DiscardHandler)); levels.Global().String() != "500/s:500" {
		t.Errorf("with the bucket off, global %q, want the environment's 500/s:500", levels.Global())
	}
}

// TestLogLevelsSaysWhatApplies: the start-up log names the global limit
// that applies, and warns when the limits bucket's _global replaces the
// environment's; without levels it says nothing.
func TestLogLevelsSaysWhatApplies(t *testing.T) {
	env := throttle.Policy{Limits: throttle.Limits{{Rate: 50, Period: time.Second, Burst: 50}}}
	bucket := throttle.Policy{Limits: throttle.Limits{{Rate: 20, Period: time.Second, Burst: 20}}}
	for _, tc := range []struct {
		name       string
		env, live  throttle.Policy
		want, warn string
	}{
		{"none", throttle.Policy{}, throttle.Policy{}, "", ""},
		{"from the environment", env, env, "global=50/s", ""},
		{"replaced by the bucket", env, bucket, "global=20/s", "replaces THROTTLER_GLOBAL_LIMIT"},
	} {
		var out strings.Builder
		log := slog.New(slog.NewTextHandler(&out, nil))
		cfg := &Settings{Levels: throttle.LevelRules{GlobalPolicy: tc.env}}
		logLevels(cfg, throttle.LevelRules{GlobalPolicy: tc.live}, log)
		got := out.String()
		if tc.want == "" && got != "" {
			t.Errorf("%s: logged %q, want nothing", tc.name, got)
		}
		if !strings.Contains(got, tc.want) || (tc.warn != "") != strings.Contains(got, "WARN") || !strings.Contains(got, tc.warn) {
			t.Errorf("%s: logged %q, want %q and a warning %q", tc.name, got, tc.want, tc.warn)
		}
	}
}

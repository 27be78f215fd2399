package main

import (
	"strings"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/testenv"
)

// TestCheckConfigRefusesAnUnknownVariable checks that a misspelt variable
// fails check-config with exit 2, naming the variable meant.
func TestCheckConfigRefusesAnUnknownVariable(t *testing.T) {
	t.Setenv("THROTTLER_DEFAULT_LIMITS", "5/s")
	cli(t, "check-config").want(t, "check-config", exitConfig, nil,
		[]string{"THROTTLER_DEFAULT_LIMITS: no such variable (did you mean THROTTLER_DEFAULT_LIMIT?)"})
}

// TestWorkerWarnsOfAnUnknownVariable starts the worker with a misspelt
// variable: it runs (the variable is ignored) and its log says which
// variable was meant.
func TestWorkerWarnsOfAnUnknownVariable(t *testing.T) {
	s := setup(t)
	t.Setenv("THROTTLER_DEFAULT_LIMITS", "5/s")
	c := startChild(t)
	testenv.Eventually(t, 30*time.Second, "the worker's warning", func() bool {
		return strings.Contains(c.stderr.String(), "did you mean THROTTLER_DEFAULT_LIMIT?")
	})
	if out := c.stderr.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "var=THROTTLER_DEFAULT_LIMITS") {
		t.Fatalf("the warning is not a WARN line of the log naming the variable:\n%s", out)
	}
	// The worker says which servers it uses, as the commands do.
	if out := c.stderr.String(); !strings.Contains(out, `msg="using servers" nats=`+s.nats.URL()+` nats_from="from NATS_URL" redis=`+s.redis.URL()) {
		t.Fatalf("the worker's log does not name its servers:\n%s", out)
	}
	if code := c.stop(t); code != exitOK {
		t.Fatalf("worker exit %d after SIGTERM, want 0:\n%s", code, c.stderr)
	}
}

// TestUnknownTimeZoneExits2 checks that a THROTTLER_TIMEZONE no zone
// database knows fails check-config and the worker with exit 2, naming
// the variable, before the worker connects to anything.
func TestUnknownTimeZoneExits2(t *testing.T) {
	t.Setenv("THROTTLER_TIMEZONE", "Mars/Olympus")
	for _, args := range [][]string{{"check-config"}, {"run"}} {
		cli(t, args...).want(t, strings.Join(args, " "), exitConfig, nil, []string{"THROTTLER_TIMEZONE", "Mars/Olympus"})
	}
}

// TestGroupLimitsWithoutGroupFromExits2 checks that a group's limit set
// without THROTTLER_GROUP_FROM fails check-config and the worker with
// exit 2, naming the variable, before the worker connects to anything;
// set together, check-config prints the levels' variables.
func TestGroupLimitsWithoutGroupFromExits2(t *testing.T) {
	t.Setenv("THROTTLER_GROUP_LIMITS", "org-1=1000/s")
	for _, args := range [][]string{{"check-config"}, {"run"}} {
		cli(t, args...).want(t, strings.Join(args, " "), exitConfig, nil, []string{"THROTTLER_GROUP_LIMITS: needs THROTTLER_GROUP_FROM"})
	}
	t.Setenv("THROTTLER_GROUP_FROM", "header:X-Org")
	t.Setenv("THROTTLER_GLOBAL_LIMIT", "500/s")
	cli(t, "check-config").want(t, "check-config", exitOK,
		[]string{"THROTTLER_GLOBAL_LIMIT=500/s\n", "THROTTLER_GROUP_FROM=header:X-Org\n", "THROTTLER_GROUP_LIMITS=org-1=1000/s\n", "THROTTLER_GROUP_REQUIRED=false\n"}, nil)
}

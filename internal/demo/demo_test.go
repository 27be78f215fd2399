package demo

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/throttler/throttler/internal/testenv"
)

// verdicts returns the verdict line of each tenant in out, keyed by tenant.
func verdicts(t *testing.T, out string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for line := range strings.Lines(out) {
		fields := strings.Fields(line)
		if len(fields) >= 2 && fields[0] == "verdict" {
			got[fields[1]] = strings.TrimSpace(line)
		}
	}
	return got
}

func TestRun(t *testing.T) {
	r := testenv.StartRedis(t)
	t.Setenv("REDIS_URL", r.URL())
	var out, log bytes.Buffer
	if err := Run(t.Context(), Options{Args: []string{"-duration", "4s"}, Out: &out, Log: &log}); err != nil {
		t.Fatalf("Run: %v\nlog:\n%s", err, log.String())
	}
	text := out.String()
	t.Logf("output:\n%s", text)
	if log.Len() > 0 {
		t.Logf("log:\n%s", log.String())
	}

	const header = "tenant  limit"
	if !strings.Contains(text, header) || !strings.Contains(text, "rate/s (last 5s)") {
		t.Errorf("output has no table header %q", header)
	}
	if !strings.Contains(text, "final, after shutdown") {
		t.Error("output has no final table")
	}
	if !strings.Contains(text, "nothing lost") {
		t.Error("output does not say that nothing was lost")
	}
	want := map[string]string{
		"flood":  "held to limit",
		"steady": "all admitted promptly",
		"bursty": "held to limit",
	}
	got := verdicts(t, text)
	for tenant, outcome := range want {
		line, ok := got[tenant]
		if !ok {
			t.Errorf("no verdict line for tenant %s", tenant)
			continue
		}
		if !strings.HasSuffix(line, "-> "+outcome) {
			t.Errorf("verdict for %s = %q, want it to end with %q", tenant, line, "-> "+outcome)
		}
	}
}

func TestRunRedisUnreachable(t *testing.T) {
	port := testenv.FreePort(t)
	t.Setenv("REDIS_URL", "redis://127.0.0.1:"+strconv.Itoa(port))
	err := Run(t.Context(), Options{Args: []string{"-duration", "1s"}})
	if err == nil {
		t.Fatal("Run with nothing listening at REDIS_URL succeeded, want an error")
	}
	for _, want := range []string{"REDIS_URL is unreachable", "scripts/demo.sh"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestRunBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-workers", "0"},
		{"-duration", "0s"},
		{"-nope"},
		{"extra"},
	} {
		var log bytes.Buffer
		if err := Run(t.Context(), Options{Args: args, Log: &log}); err == nil {
			t.Errorf("Run(%q) succeeded, want an error", args)
		}
	}
}

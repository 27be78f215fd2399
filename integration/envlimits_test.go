package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/testenv"
)

// TestWorkersWarnOfOtherEnvironmentLimits: a worker started beside
// workers whose environment gives a group another limit (a rollout that
// changes THROTTLER_GROUP_LIMITS, which the workers do not agree on as
// they do on the tenants' limits) warns that the quota is not held until
// all agree, counting them; one started beside workers that agree says so
// (at debug) and does not warn.
func TestWorkersWarnOfOtherEnvironmentLimits(t *testing.T) {
	bin := buildThrottler(t)
	n := testenv.StartNATS(t, "")
	rs := testenv.StartRedis(t)
	start := func(groups string) *testenv.Buffer {
		vars := map[string]string{"NATS_URL": n.URL(), "REDIS_URL": rs.URL(), "THROTTLER_TENANT_LIMITS": "acme=10/s",
			"THROTTLER_GROUP_FROM": "subject:3", "THROTTLER_GROUP_LIMITS": groups, "THROTTLER_LOG_LEVEL": "debug"}
		cmd, _, stderr := throttlerCmd(context.Background(), bin, vars)
		must(t, cmd.Start(), "start throttler")
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return stderr
	}
	const agree, differ = "agree on the limits in their environment", "other workers of the fleet run with other group or global limits"
	first := start("org=10/s")
	testenv.Eventually(t, 30*time.Second, "the first worker's check", func() bool { return strings.Contains(first.String(), agree) })
	second := start("org=10/s")
	testenv.Eventually(t, 30*time.Second, "the second worker's check", func() bool {
		return strings.Contains(second.String(), agree) || strings.Contains(second.String(), differ)
	})
	if strings.Contains(second.String(), differ) {
		t.Errorf("a worker beside one of the same limits: want it to find both agreeing\n%s", second)
	}
	third := start("org=5/s")
	testenv.Eventually(t, 30*time.Second, "the third worker's warning", func() bool { return strings.Contains(third.String(), differ) })
	if !strings.Contains(third.String(), "workers_differing=2") {
		t.Errorf("a worker beside two of other limits: want workers_differing=2\n%s", third)
	}
	if strings.Contains(third.String(), "this worker applies theirs") || strings.Contains(first.String(), "this worker applies theirs") {
		t.Errorf("workers whose tenants' limits are the same applied each other's")
	}
}

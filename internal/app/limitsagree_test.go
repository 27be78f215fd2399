package app

import "testing"

// TestEnvLimitsFingerprintsTheParsedLimits: workers agree when their
// environments give the same limits, however written (a burst left out is
// the rate), and differ when a limit, a group's or the time zone does.
func TestEnvLimitsFingerprintsTheParsedLimits(t *testing.T) {
	fingerprint := func(vars map[string]string) string {
		t.Helper()
		s, err := LoadSettingsFrom(vars)
		if err != nil {
			t.Fatalf("settings %v: %v", vars, err)
		}
		return envLimits(s)
	}
	base := fingerprint(map[string]string{"THROTTLER_TENANT_LIMITS": "acme=10/s,globex=5/m"})
	for _, same := range []map[string]string{
		{"THROTTLER_TENANT_LIMITS": "acme=10/s:10,globex=5/m:5"},
		{"THROTTLER_TENANT_LIMITS": "globex=5/m, acme=10/s"},
	} {
		if got := fingerprint(same); got != base {
			t.Errorf("%v: fingerprint %s, want %s as for acme=10/s,globex=5/m", same, got, base)
		}
	}
	for _, other := range []map[string]string{
		{"THROTTLER_TENANT_LIMITS": "acme=5/s,globex=5/m"},
		{"THROTTLER_TENANT_LIMITS": "acme=10/s,globex=5/m", "THROTTLER_DEFAULT_LIMIT": "50/s"},
		{"THROTTLER_TENANT_LIMITS": "acme=10/s,globex=5/m", "THROTTLER_GROUP_LIMITS": "org=1/s", "THROTTLER_GROUP_FROM": "subject:3"},
		{"THROTTLER_TENANT_LIMITS": "acme=10/s,globex=5/m", "THROTTLER_TIMEZONE": "Europe/Paris"},
	} {
		if got := fingerprint(other); got == base {
			t.Errorf("%v: the same fingerprint as acme=10/s,globex=5/m", other)
		}
	}
}

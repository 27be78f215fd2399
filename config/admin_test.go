package config

import (
	"strings"
	"testing"
)

func TestAdminAddrNeedsTokenBeyondLoopback(t *testing.T) {
	t.Parallel()
	const token = "0123456789abcdef"
	for _, tc := range []struct {
		addr, token string
		bad         string // the variable named in the problem, "" for none
	}{
		{"", "", ""},
		{"127.0.0.1:8081", "", ""},
		{"[::1]:8081", "", ""},
		{"localhost:8081", "", ""},
		{":8081", "", "THROTTLER_ADMIN_ADDR"},
		{"0.0.0.0:8081", "", "THROTTLER_ADMIN_ADDR"},
		{"10.1.2.3:8081", "", "THROTTLER_ADMIN_ADDR"},
		{":8081", token, ""},
		{"10.1.2.3:8081", token, ""},
		{"127.0.0.1", "", "THROTTLER_ADMIN_ADDR"},
		{"127.0.0.1:8081", "short", "THROTTLER_ADMIN_TOKEN"},
		{"127.0.0.1:8081", "with a space 0123456789", "THROTTLER_ADMIN_TOKEN"},
	} {
		_, err := LoadFrom(map[string]string{"THROTTLER_ADMIN_ADDR": tc.addr, "THROTTLER_ADMIN_TOKEN": tc.token})
		ps := problems(t, err)
		switch {
		case tc.bad == "" && len(ps) > 0:
			t.Errorf("addr %q token %q: unexpected problems %q", tc.addr, tc.token, ps)
		case tc.bad != "" && (len(ps) != 1 || !strings.HasPrefix(ps[0], tc.bad)):
			t.Errorf("addr %q token %q: problems %q, want one naming %s", tc.addr, tc.token, ps, tc.bad)
		}
	}
}

func TestPrintMasksAdminToken(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, map[string]string{"THROTTLER_ADMIN_ADDR": ":8081", "THROTTLER_ADMIN_TOKEN": "s3cret-admin-token"})
	checkPrint(t, c, []string{"s3cret-admin-token"}, []string{"THROTTLER_ADMIN_TOKEN=****\n", "THROTTLER_ADMIN_ADDR=:8081\n"})
	checkPrint(t, mustLoad(t, nil), nil, []string{"THROTTLER_ADMIN_TOKEN=\n"})
}

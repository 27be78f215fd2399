package ops

import (
	"slices"
	"testing"
)

func TestTenantSubjects(t *testing.T) {
	for _, c := range []struct {
		subjects []string
		token    int
		want     []string
		ok       bool
	}{
		{[]string{"jobs.>"}, 2, []string{"jobs.acme", "jobs.acme.>"}, true},
		{[]string{"jobs.*.email", "jobs.*.sms"}, 2, []string{"jobs.acme.email", "jobs.acme.sms"}, true},
		{[]string{"jobs.acme.x", "jobs.globex.x"}, 2, []string{"jobs.acme.x"}, true},
		{[]string{"jobs.>"}, 3, nil, false},
		{[]string{"jobs.*"}, 3, nil, true},
	} {
		got, ok := TenantSubjects(c.subjects, c.token, "acme")
		if ok != c.ok || !slices.Equal(got, c.want) {
			t.Errorf("TenantSubjects(%q, %d) = %q, %v; want %q, %v", c.subjects, c.token, got, ok, c.want, c.ok)
		}
	}
}

package consumer

import (
	"strings"
	"testing"
)

func TestTenantsInTurn(t *testing.T) {
	cases := []struct {
		in, want string // jobs as tenant+number, space-separated
	}{
		{"", ""},
		{"a1", "a1"},
		{"a1 a2 a3", "a1 a2 a3"},
		// A flood's group with one job of another tenant at its end: that
		// job starts second, not last.
		{"a1 a2 a3 a4 b1", "a1 b1 a2 a3 a4"},
		{"a1 a2 b1 c1 b2 a3 c2", "a1 b1 c1 a2 b2 c2 a3"},
		{"b1 a1 a2 a3 b2", "b1 a1 a2 b2 a3"},
	}
	for _, c := range cases {
		var jobs []*item
		for _, f := range strings.Fields(c.in) {
			jobs = append(jobs, &item{job: Job{Tenant: f[:1], ID: f}})
		}
		var got []string
		for _, it := range tenantsInTurn(jobs) {
			got = append(got, it.job.ID)
		}
		if g := strings.Join(got, " "); g != c.want {
			t.Errorf("tenantsInTurn(%q) = %q, want %q", c.in, g, c.want)
		}
	}
}

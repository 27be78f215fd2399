package ops

import (
	"fmt"
	"testing"
)

// TestTenantFilters: the job subjects are narrowed to those that can hold
// the tenant's jobs, by the token that carries it.
func TestTenantFilters(t *testing.T) {
	for _, c := range []struct {
		subjects []string
		token    int
		byToken  bool
		want     []string
	}{
		{[]string{"jobs.>"}, 2, true, []string{"jobs.acme", "jobs.acme.>"}},
		{[]string{"jobs.*"}, 2, true, []string{"jobs.acme"}},
		{[]string{"jobs.*.send"}, 2, true, []string{"jobs.acme.send"}},
		{[]string{"jobs.globex"}, 2, true, nil},
		{[]string{"jobs.acme", "mail.*"}, 2, true, []string{"jobs.acme", "mail.acme"}},
		{[]string{">"}, 2, true, []string{">"}},
		{[]string{"jobs.*"}, 3, true, nil},
		{[]string{"jobs.>"}, 3, true, []string{"jobs.>"}},
		{[]string{"jobs.>"}, 0, false, []string{"jobs.>"}},
		{[]string{"jobs.*", "jobs.>"}, 2, true, []string{"jobs.acme", "jobs.acme.>"}},
		{[]string{"jobs.*.x", "jobs.acme.*"}, 2, true, []string{"jobs.acme.*"}},
	} {
		if got := tenantFilters(c.subjects, c.token, c.byToken, "acme"); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("tenantFilters(%v, %d) = %v, want %v", c.subjects, c.token, got, c.want)
		}
	}
}

// TestDeadLetterFilterIDs: ids select only those dead letters, and the
// other fields narrow them further.
func TestDeadLetterFilterIDs(t *testing.T) {
	acme7, acme8, globex9 := DeadLetter{ID: 7, Tenant: "acme"}, DeadLetter{ID: 8, Tenant: "acme"}, DeadLetter{ID: 9, Tenant: "globex"}
	f := DeadLetterFilter{IDs: []uint64{7, 9}}
	if !f.match(acme7) || f.match(acme8) || !f.match(globex9) {
		t.Fatal("ids 7 and 9 select other dead letters than 7 and 9")
	}
	f.Tenant = "acme"
	if !f.match(acme7) || f.match(globex9) {
		t.Fatal("a tenant does not narrow the ids")
	}
}

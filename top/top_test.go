package top

import (
	"testing"
)

// TestRowsAddUpAcrossWorkers: each tenant's rows from several workers add
// up (the oldest wait is the longest, a negative part is cut at 0 only in
// the sum), the most waiting come first and More counts the rest.
func TestRowsAddUpAcrossWorkers(t *testing.T) {
	by := map[string]*merged{}
	for _, r := range []Row{
		{Tenant: "acme", Admitted: 1, Moved: 10, Paused: 5, OldestWait: 3, Binding: "paused: x"},
		{Tenant: "acme", Admitted: 2, Moved: 5, Parked: -1, OldestWait: 9, DeadLetters: 1},
		{Tenant: "globex", Naked: 3, Parked: 2, Deferred: 4, Binding: "limit 5/s"},
		{Tenant: "initech", Deferred: 1},
	} {
		add(by, r)
	}
	v := view(by, 2, 2)
	if v.Tenants != 3 || v.More != 1 || len(v.Rows) != 2 || v.Workers != 2 {
		t.Fatalf("view %+v, want 3 tenants, 2 shown, 1 more, 2 workers", v)
	}
	a := v.Rows[0]
	if a.Tenant != "acme" || a.Admitted != 3 || a.Moved != 15 || a.Paused != 5 || a.Parked != 0 || a.OldestWait != 9 || a.DeadLetters != 1 || a.Binding != "paused: x" {
		t.Fatalf("acme %+v, want the two workers' rows added up", a)
	}
	if v.Rows[1].Tenant != "globex" {
		t.Fatalf("second row %s, want globex (5 waiting)", v.Rows[1].Tenant)
	}
}

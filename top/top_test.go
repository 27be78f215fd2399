package top

import (
	"testing"
	"time"
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

// TestParkedJobsWokenElsewhereStopCounting: the jobs one worker parked
// and another saw come back woken no longer set the oldest wait, nor keep
// their tenant in the view; the parked jobs still waiting do, and a row
// of a worker that sends no runs keeps its own oldest wait.
func TestParkedJobsWokenElsewhereStopCounting(t *testing.T) {
	by := map[string]*merged{}
	for _, r := range []Row{
		// Worker 1 parked 20 of gq's jobs 41 s ago (all woken since, on
		// worker 2) and 20 more 2 s ago, of which 5 were woken on worker 1;
		// a worker of its own parked 3 more 1 s ago.
		{Tenant: "gq", Parked: 35, OldestWait: 41, Runs: []ParkedRun{
			{N: 20, Wait: 41 * time.Second},
			{N: 20, Wait: 2 * time.Second},
			{N: -5},
		}},
		{Tenant: "gq", Parked: -20, Runs: []ParkedRun{{N: -20}}},
		{Tenant: "gq", Parked: 3, OldestWait: 1, Runs: []ParkedRun{{N: 3, Wait: time.Second}}},
		// ga's parked jobs are all back: nothing to show.
		{Tenant: "ga", Parked: 4, OldestWait: 30, Runs: []ParkedRun{{N: 4, Wait: 30 * time.Second}}},
		{Tenant: "ga", Parked: -4, Runs: []ParkedRun{{N: -4}}},
		// acme's moved jobs wait 7 s on worker 1; an older worker says 9.
		{Tenant: "acme", Moved: 3, Parked: 1, OldestWait: 20, UnparkedWait: 7, Runs: []ParkedRun{{N: 1, Wait: 20 * time.Second}}},
		{Tenant: "acme", Parked: -1, Runs: []ParkedRun{{N: -1}}},
		{Tenant: "acme", Moved: 1, OldestWait: 9},
	} {
		add(by, r)
	}
	v := view(by, 3, -1)
	if len(v.Rows) != 2 || v.Tenants != 2 {
		t.Fatalf("rows %+v, want gq and acme (ga has nothing waiting)", v.Rows)
	}
	for _, r := range v.Rows {
		switch r.Tenant {
		case "gq":
			if r.Parked != 18 || r.OldestWait != 2 {
				t.Errorf("gq: %d parked, oldest %gs, want 18 parked, the oldest 2 s ago", r.Parked, r.OldestWait)
			}
		case "acme":
			if r.Moved != 4 || r.Parked != 0 || r.OldestWait != 9 {
				t.Errorf("acme: %d moved, %d parked, oldest %gs, want 4 moved, none parked, 9 s", r.Moved, r.Parked, r.OldestWait)
			}
		default:
			t.Errorf("row of %s, want none", r.Tenant)
		}
	}
}

package consumer

import (
	"fmt"
	"sort"
	"testing"
)

// TestStatsCapTenants: past the cap, the counts of tenants not yet seen go
// to OtherTenants, so memory and /metrics stay bounded however many
// tenants come and go; tenants counted before keep their own counts.
func TestStatsCapTenants(t *testing.T) {
	s := NewStats(3)
	for i := range 10 {
		s.Add(fmt.Sprintf("t%d", i), func(ts *TenantStats) { ts.Delivered++ })
	}
	s.Add("t1", func(ts *TenantStats) { ts.Delivered++ })
	got := s.Snapshot()
	want := map[string]int64{"t0": 1, "t1": 2, "t2": 1, OtherTenants: 7}
	if len(got) != len(want) {
		t.Fatalf("tenants %v, want %v", sortedTenants(got), want)
	}
	for tenant, n := range want {
		if got[tenant].Delivered != n {
			t.Errorf("%s: delivered %d, want %d", tenant, got[tenant].Delivered, n)
		}
	}
}

// sortedTenants returns the tenants of a Stats snapshot in order.
func sortedTenants(m map[string]TenantStats) []string {
	ts := make([]string, 0, len(m))
	for t := range m {
		ts = append(ts, t)
	}
	sort.Strings(ts)
	return ts
}

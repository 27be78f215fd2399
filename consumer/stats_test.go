package consumer

import (
	"fmt"
	"net/http/httptest"
	"strings"
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
		t.Fatalf("tenants %v, want %v", SortedTenants(got), want)
	}
	for tenant, n := range want {
		if got[tenant].Delivered != n {
			t.Errorf("%s: delivered %d, want %d", tenant, got[tenant].Delivered, n)
		}
	}
}

// TestMetricsHandlerCapsTenants: /metrics shows at most the cap of tenants
// plus OtherTenants in each series.
func TestMetricsHandlerCapsTenants(t *testing.T) {
	w := &Worker{stats: NewStats(2)}
	for i := range 5 {
		w.stats.Add(fmt.Sprintf("t%d", i), func(ts *TenantStats) { ts.Admitted++ })
	}
	rec := httptest.NewRecorder()
	MetricsHandler(w).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, line := range []string{
		`throttler_admitted_total{tenant="t0"} 1`,
		`throttler_admitted_total{tenant="t1"} 1`,
		`throttler_admitted_total{tenant="` + OtherTenants + `"} 3`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", line, body)
		}
	}
	if n := strings.Count(body, "throttler_admitted_total{"); n != 3 {
		t.Errorf("%d admitted series, want 3", n)
	}
}

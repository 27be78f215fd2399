package integration

import (
	"slices"
	"testing"
	"time"
)

// TestFleetRates: the fleet's rate outside windows leaves each window out,
// overlapping or at the edges, and a window's bound is limit × window +
// burst.
func TestFleetRates(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	// 10 a second over [0, 60 s), and 50 more in [20 s, 21 s).
	var ts []time.Time
	for i := range 600 {
		ts = append(ts, at(float64(i)/10))
	}
	for i := range 50 {
		ts = append(ts, at(20+float64(i)/50))
	}
	slices.SortFunc(ts, time.Time.Compare)
	windows := []fleetWindow{
		{name: "a", from: at(18), to: at(25)},
		{name: "b", from: at(24), to: at(30)}, // overlaps a
		{name: "c", from: at(55), to: at(70)}, // past the end
	}
	rate, jobs, span := cleanRate(ts, at(0), at(60), windows)
	if span != 43*time.Second || jobs != 430 || rate != 10 {
		t.Errorf("cleanRate = %g/s, %d jobs over %s; want 10/s, 430 over 43s", rate, jobs, span)
	}
	admitted, bound, excess := windowExcess(ts, windows[0], 10)
	if admitted != 120 || bound != 80 || excess != 40 {
		t.Errorf("windowExcess = %d admitted, bound %g, excess %g; want 120, 80, 40", admitted, bound, excess)
	}
}

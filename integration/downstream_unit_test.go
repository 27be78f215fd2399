package integration

import (
	"math"
	"testing"
	"time"
)

// TestSeriesArithmetic checks, at fixed times, the in-flight arithmetic the
// fleet tests judge caps and holds by: the fractions of a window spent at a
// count, the first moment a count is reached, the maximum, and duplicates.
func TestSeriesArithmetic(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// 0 until 100, 1 until 200, 2 until 500, 1 until 800, then 0.
	s := []step{{at(100), 1}, {at(200), 2}, {at(500), 1}, {at(800), 0}}
	exactly := func(k int) func(int) bool { return func(n int) bool { return n == k } }
	atLeast := func(k int) func(int) bool { return func(n int) bool { return n >= k } }
	for _, tc := range []struct {
		name     string
		from, to int
		ok       func(int) bool
		want     float64
	}{
		{"at 2 over all", 0, 1000, exactly(2), 0.3},
		{"at 1 over all", 0, 1000, exactly(1), 0.4},
		{"at 0 over all", 0, 1000, exactly(0), 0.3},
		{"at least 1 over all", 0, 1000, atLeast(1), 0.7},
		{"window inside a step", 250, 450, exactly(2), 1},
		{"window starting on a step", 200, 500, exactly(2), 1},
		{"window across the start", 150, 250, atLeast(2), 0.5},
		{"window after the last step", 900, 1000, exactly(0), 1},
		{"empty window", 300, 300, exactly(2), 0},
	} {
		if got := seriesShare(s, at(tc.from), at(tc.to), tc.ok); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: share %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := seriesMax(s); got != 2 {
		t.Errorf("max %d, want 2", got)
	}
	for _, tc := range []struct {
		name string
		from int
		ok   func(int) bool
		want int // -1: never
	}{
		{"2 from the start", 0, atLeast(2), 200},
		{"2 from within it", 300, atLeast(2), 300},
		{"2 after it", 600, atLeast(2), -1},
		{"0 from a step", 800, exactly(0), 800},
		{"0 before anything", 50, exactly(0), 50},
	} {
		got, ok := seriesFirst(s, at(tc.from), tc.ok)
		switch {
		case tc.want < 0 && ok:
			t.Errorf("%s: %v, want never", tc.name, got.Sub(t0))
		case tc.want >= 0 && (!ok || !got.Equal(at(tc.want))):
			t.Errorf("%s: %v (found %v), want %dms", tc.name, got.Sub(t0), ok, tc.want)
		}
	}
	dups := duplicateKeys([]call{{Key: "a"}, {Key: "b"}, {Key: "a"}, {Key: "c"}, {Key: "a"}})
	if len(dups) != 1 || dups["a"] != 3 {
		t.Errorf("duplicates %v, want a three times", dups)
	}
}

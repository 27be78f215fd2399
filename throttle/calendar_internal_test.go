package throttle

import (
	"testing"
	"time"
)

// Window boundaries follow the local calendar: a New York day across a
// daylight-saving change is 23 or 25 hours, a month ends on its last day
// (February included), a week starts on Monday.
func TestCalendarBoundaries(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		unit         string
		at           time.Time
		start, next  time.Time
		wantDuration time.Duration
	}{
		// Spring: 2026-03-08 02:00 EST becomes 03:00 EDT.
		{"d", time.Date(2026, 3, 8, 12, 0, 0, 0, ny), time.Date(2026, 3, 8, 0, 0, 0, 0, ny), time.Date(2026, 3, 9, 0, 0, 0, 0, ny), 23 * time.Hour},
		// Fall: 2026-11-01 02:00 EDT becomes 01:00 EST.
		{"d", time.Date(2026, 11, 1, 23, 0, 0, 0, ny), time.Date(2026, 11, 1, 0, 0, 0, 0, ny), time.Date(2026, 11, 2, 0, 0, 0, 0, ny), 25 * time.Hour},
		{"h", time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC).In(ny), time.Date(2026, 11, 1, 5, 0, 0, 0, time.UTC), time.Date(2026, 11, 1, 6, 0, 0, 0, time.UTC), time.Hour},
		{"mo", time.Date(2026, 1, 31, 23, 59, 59, 0, time.UTC), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), 31 * 24 * time.Hour},
		{"mo", time.Date(2026, 2, 14, 0, 0, 0, 0, time.UTC), time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), 28 * 24 * time.Hour},
		{"mo", time.Date(2028, 2, 29, 12, 0, 0, 0, time.UTC), time.Date(2028, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC), 29 * 24 * time.Hour},
		// 2026-12-06 is a Sunday: its week started Monday 2026-11-30.
		{"w", time.Date(2026, 12, 6, 23, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC), 7 * 24 * time.Hour},
		{"w", time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 14, 0, 0, 0, 0, time.UTC), 7 * 24 * time.Hour},
		{"s", time.Date(2026, 12, 7, 0, 0, 1, 999, time.UTC), time.Date(2026, 12, 7, 0, 0, 1, 0, time.UTC), time.Date(2026, 12, 7, 0, 0, 2, 0, time.UTC), time.Second},
		{"m", time.Date(2026, 12, 7, 0, 1, 59, 0, time.UTC), time.Date(2026, 12, 7, 0, 1, 0, 0, time.UTC), time.Date(2026, 12, 7, 0, 2, 0, 0, time.UTC), time.Minute},
	} {
		s := windowStart(tc.unit, tc.at)
		n := nextStart(tc.unit, s)
		if !s.Equal(tc.start) || !n.Equal(tc.next) || n.Sub(s) != tc.wantDuration {
			t.Errorf("%s at %s: window [%s, %s) of %s, want [%s, %s) of %s", tc.unit, tc.at, s, n, n.Sub(s), tc.start, tc.next, tc.wantDuration)
		}
		if tc.wantDuration > calendarUnits[tc.unit] {
			t.Errorf("%s: a window of %s is longer than the unit's nominal %s", tc.unit, tc.wantDuration, calendarUnits[tc.unit])
		}
	}
	// The starts passed: the window before, now's, and those after up to
	// past the horizon (at least two, a month ahead included).
	at := time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC)
	got := calendarStarts("mo", time.UTC, at, 10*time.Minute)
	if len(got) != 5 || !got[0].Equal(time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC)) || !got[3].Equal(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("starts of mo at %s: %v", at, got)
	}
	if got := calendarStarts("s", time.UTC, at, time.Hour); len(got) != maxCalendarAhead+3 {
		t.Errorf("starts of s over an hour: %d, want the bound %d", len(got), maxCalendarAhead+3)
	}
}

// The windows passed cover a Redis clock up to calendarSkew behind or
// ahead of the worker's, short windows included, within the bound.
func TestCalendarStartsCoverTheSkew(t *testing.T) {
	at := time.Date(2026, 12, 7, 10, 0, 0, 300_000_000, time.UTC)
	for _, unit := range []string{"s", "m", "h", "d", "w", "mo"} {
		for _, horizon := range []time.Duration{0, time.Minute, time.Hour} {
			got := calendarStarts(unit, time.UTC, at, horizon)
			if len(got) > 64 || got[0].After(at.Add(-calendarSkew)) || got[len(got)-2].Before(at.Add(calendarSkew)) {
				t.Errorf("%s over %s: %d starts from %s to %s, want at most 64 covering %s either side of %s", unit, horizon, len(got), got[0], got[len(got)-1], calendarSkew, at)
			}
			if c := calendarCurrent(got, at); !got[c].Equal(windowStart(unit, at)) {
				t.Errorf("%s: the current window is %s, want %s", unit, got[c], windowStart(unit, at))
			}
		}
	}
}

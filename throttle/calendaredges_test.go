package throttle_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// The ends of calendar windows where the calendar is uneven, decided at
// fixed times against a real Redis: days across daylight-saving changes,
// month ends (February, a leap year's, a year's end, a month in a zone
// across a change) and ISO weeks (from Monday 00:00, across a year's end
// and a change). Every wait is written out as a duration, not computed
// with the calendar code under test.

// zone loads the IANA time zone name, failing t if it does not load.
func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("time zone %s: %v", name, err)
	}
	return loc
}

// wantCounts fails t unless the calendar window hash key holds exactly
// the counts of counts, by window start, and nothing else.
func wantCounts(t *testing.T, e env, key string, counts map[time.Time]int) {
	t.Helper()
	got := e.rdb.HGetAll(context.Background(), key).Val()
	want := map[string]string{}
	for s, n := range counts {
		want[fmt.Sprint(s.UnixMicro())] = fmt.Sprint(n)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("counts of %s: %v, want %v (µs of each window's start)", key, got, want)
	}
}

// wantDecision fails t unless job id of tenant decided at at under l is
// admitted (wait 0) or reserved for exactly wait.
func wantDecision(t *testing.T, l *throttle.Limiter, tenant, id string, at time.Time, wait time.Duration) {
	t.Helper()
	d := decide(t, l, throttle.Request{Tenant: tenant, JobID: id, At: at})
	want := throttle.Reserved
	if wait == 0 {
		want = throttle.Admitted
	}
	if d.Outcome != want || d.Wait != wait {
		t.Fatalf("%s at %s: %s, wait %s; want %s, wait %s", id, at, d.Outcome, d.Wait, want, wait)
	}
}

// A New York day is midnight to midnight local time: 23 hours on
// 2026-03-08, 25 on 2026-11-01. Jobs decided a second either side of the
// change count in one window; the day's last second is still that day
// (in the fall 24 h 59 min 59 s after its midnight), and a job over the
// window waits exactly until the next local midnight; jobs back at their
// slot run uncharged.
func TestCalendarDayAcrossDaylightSaving(t *testing.T) {
	ny := zone(t, "America/New_York")
	for _, tc := range []struct {
		name     string
		midnight time.Time     // local midnight starting the day of the change
		change   time.Time     // the instant the clocks change, 02:00 local before it
		day      time.Duration // the day's length
		// afterChange is the wait of a job a second after the change,
		// until the next local midnight.
		afterChange time.Duration
	}{
		// 02:00 EST becomes 03:00 EDT: 03:00:01 to midnight is 20:59:59.
		{"spring", time.Date(2026, 3, 8, 0, 0, 0, 0, ny), time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC), 23 * time.Hour, 20*time.Hour + 59*time.Minute + 59*time.Second},
		// 02:00 EDT becomes 01:00 EST: 01:00:01 EST to midnight is 22:59:59.
		{"fall", time.Date(2026, 11, 1, 0, 0, 0, 0, ny), time.Date(2026, 11, 1, 6, 0, 0, 0, time.UTC), 25 * time.Hour, 22*time.Hour + 59*time.Minute + 59*time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			l := newLimiter(t, e.rdb, e.prefix, time.Hour, throttle.Limits{throttle.CalendarWindow(2, "d", "America/New_York")})
			next := tc.midnight.Add(tc.day)
			if h, m, s := next.In(ny).Clock(); h != 0 || m != 0 || s != 0 {
				t.Fatalf("the test's day: %s after %s is %s, not a midnight", tc.day, tc.midnight, next.In(ny))
			}
			last := next.Add(-time.Second) // 23:59:59 local
			wantDecision(t, l, "acme", "j0", tc.midnight, 0)
			wantDecision(t, l, "acme", "j1", tc.change.Add(-time.Second), 0)
			wantDecision(t, l, "acme", "j2", tc.change.Add(time.Second), tc.afterChange)
			wantDecision(t, l, "acme", "j3", last, time.Second)
			wantDecision(t, l, "acme", "j4", last, 24*time.Hour+time.Second)
			key := e.prefix + ":{acme}:c:d@America/New_York"
			dayAfter := next.Add(24 * time.Hour)
			wantCounts(t, e, key, map[time.Time]int{tc.midnight: 2, next: 2, dayAfter: 1})
			// At the next midnight j2 and j3 run on their reservations,
			// uncharged; a new job waits a day, for the day after, which
			// holds j4 alone.
			wantDecision(t, l, "acme", "j2", next, 0)
			wantDecision(t, l, "acme", "j3", next, 0)
			wantDecision(t, l, "acme", "k", next, 24*time.Hour)
			wantCounts(t, e, key, map[time.Time]int{next: 2, dayAfter: 2})
		})
	}
}

// calendarEdge is the end of a window met by jobs decided at fixed times:
// two fill the window at fill, the next two go to the next window and the
// fifth to the one after.
type calendarEdge struct {
	name, unit, zone   string
	fill               time.Time // in the first window
	start, next, after time.Time // the starts of the three windows
	toNext, nextLen    time.Duration
}

// checkEdge runs the jobs of c under window:2/UNIT@ZONE and fails t unless
// each waits exactly until its window: j2 from fill toNext, j3 from the
// first window's last second one second, j4 from then nextLen and a
// second; back at the next window's start j2 and j3 run uncharged and a
// new job waits nextLen, for the window after, which holds j4 alone.
func checkEdge(t *testing.T, c calendarEdge) {
	e := setup(t)
	l := newLimiter(t, e.rdb, e.prefix, time.Hour, throttle.Limits{throttle.CalendarWindow(2, c.unit, c.zone)})
	if c.next.Sub(c.fill) != c.toNext || c.after.Sub(c.next) != c.nextLen {
		t.Fatalf("the test's windows: %s to %s, %s to %s; want %s and %s", c.fill, c.next, c.next, c.after, c.toNext, c.nextLen)
	}
	last := c.next.Add(-time.Second)
	wantDecision(t, l, "acme", "j0", c.start, 0)
	wantDecision(t, l, "acme", "j1", c.fill, 0)
	wantDecision(t, l, "acme", "j2", c.fill, c.toNext)
	wantDecision(t, l, "acme", "j3", last, time.Second)
	wantDecision(t, l, "acme", "j4", last, c.nextLen+time.Second)
	key := fmt.Sprintf("%s:{acme}:c:%s@%s", e.prefix, c.unit, c.zone)
	wantCounts(t, e, key, map[time.Time]int{c.start: 2, c.next: 2, c.after: 1})
	wantDecision(t, l, "acme", "j2", c.next, 0)
	wantDecision(t, l, "acme", "j3", c.next, 0)
	wantDecision(t, l, "acme", "k", c.next, c.nextLen)
	wantCounts(t, e, key, map[time.Time]int{c.next: 2, c.after: 2})
}

// window:N/mo runs from the first of a month, 00:00 local, to the first of
// the next: January 31 is January's, February 28 of 2026 is its last
// day, February 29 of 2028 is February's, December 31 ends the year's
// last window, and March in New York is an hour short of 31 days.
func TestCalendarMonthEnds(t *testing.T) {
	ny, utc := zone(t, "America/New_York"), time.UTC
	day := 24 * time.Hour
	for _, c := range []calendarEdge{
		{name: "Jan 31 to Feb 1, New York", unit: "mo", zone: "America/New_York",
			fill: time.Date(2026, 1, 31, 12, 0, 0, 0, ny), start: time.Date(2026, 1, 1, 0, 0, 0, 0, ny),
			next: time.Date(2026, 2, 1, 0, 0, 0, 0, ny), after: time.Date(2026, 3, 1, 0, 0, 0, 0, ny),
			toNext: 12 * time.Hour, nextLen: 28 * day},
		{name: "Feb 28 to Mar 1, 2026", unit: "mo", zone: "UTC",
			fill: time.Date(2026, 2, 28, 12, 0, 0, 0, utc), start: time.Date(2026, 2, 1, 0, 0, 0, 0, utc),
			next: time.Date(2026, 3, 1, 0, 0, 0, 0, utc), after: time.Date(2026, 4, 1, 0, 0, 0, 0, utc),
			toNext: 12 * time.Hour, nextLen: 31 * day},
		// 2028 is a leap year: from Feb 28 noon, a day and a half to March.
		{name: "Feb 28 to Feb 29 to Mar 1, 2028", unit: "mo", zone: "UTC",
			fill: time.Date(2028, 2, 28, 12, 0, 0, 0, utc), start: time.Date(2028, 2, 1, 0, 0, 0, 0, utc),
			next: time.Date(2028, 3, 1, 0, 0, 0, 0, utc), after: time.Date(2028, 4, 1, 0, 0, 0, 0, utc),
			toNext: 36 * time.Hour, nextLen: 31 * day},
		{name: "Dec 31 to Jan 1", unit: "mo", zone: "UTC",
			fill: time.Date(2026, 12, 31, 12, 0, 0, 0, utc), start: time.Date(2026, 12, 1, 0, 0, 0, 0, utc),
			next: time.Date(2027, 1, 1, 0, 0, 0, 0, utc), after: time.Date(2027, 2, 1, 0, 0, 0, 0, utc),
			toNext: 12 * time.Hour, nextLen: 31 * day},
		// March 2026 in New York starts in EST and ends in EDT.
		{name: "Feb 28 to Mar 1, New York, March an hour short", unit: "mo", zone: "America/New_York",
			fill: time.Date(2026, 2, 28, 12, 0, 0, 0, ny), start: time.Date(2026, 2, 1, 0, 0, 0, 0, ny),
			next: time.Date(2026, 3, 1, 0, 0, 0, 0, ny), after: time.Date(2026, 4, 1, 0, 0, 0, 0, ny),
			toNext: 12 * time.Hour, nextLen: 31*day - time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) { checkEdge(t, c) })
	}
}

// window:N/w runs in ISO weeks, from Monday 00:00 local: Sunday is the
// week's last day, a week across a year's end is one window (2026-12-28
// to 2027-01-04), and the New York week of 2026-03-08 is 167 hours.
func TestCalendarWeekEnds(t *testing.T) {
	ny, utc := zone(t, "America/New_York"), time.UTC
	week := 7 * 24 * time.Hour
	for _, c := range []calendarEdge{
		// 2026-12-06 is a Sunday.
		{name: "Sunday to Monday", unit: "w", zone: "UTC",
			fill: time.Date(2026, 12, 6, 12, 0, 0, 0, utc), start: time.Date(2026, 11, 30, 0, 0, 0, 0, utc),
			next: time.Date(2026, 12, 7, 0, 0, 0, 0, utc), after: time.Date(2026, 12, 14, 0, 0, 0, 0, utc),
			toNext: 12 * time.Hour, nextLen: week},
		// 2026-12-31 is a Thursday of ISO week 53, which ends Sunday 2027-01-03.
		{name: "across the year's end", unit: "w", zone: "UTC",
			fill: time.Date(2026, 12, 31, 12, 0, 0, 0, utc), start: time.Date(2026, 12, 28, 0, 0, 0, 0, utc),
			next: time.Date(2027, 1, 4, 0, 0, 0, 0, utc), after: time.Date(2027, 1, 11, 0, 0, 0, 0, utc),
			toNext: 3*24*time.Hour + 12*time.Hour, nextLen: week},
		// Sunday 2026-03-01, then the week of the spring change.
		{name: "New York, into the week of the change", unit: "w", zone: "America/New_York",
			fill: time.Date(2026, 3, 1, 12, 0, 0, 0, ny), start: time.Date(2026, 2, 23, 0, 0, 0, 0, ny),
			next: time.Date(2026, 3, 2, 0, 0, 0, 0, ny), after: time.Date(2026, 3, 9, 0, 0, 0, 0, ny),
			toNext: 12 * time.Hour, nextLen: week - time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) { checkEdge(t, c) })
	}
}

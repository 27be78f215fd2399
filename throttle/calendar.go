package throttle

import (
	"fmt"
	"strings"
	"time"

	"github.com/throttler/throttler/lua"
)

// CalendarTerm starts the term of a policy's spec that is a fixed
// calendar window, as in "50/s:100+window:1000/d@Europe/Paris": at most N
// cost units in each window of the calendar (Limit.Unit).
const CalendarTerm = "window:"

// calendarUnits are the units of a calendar window, with their nominal
// lengths: the longest window of each (a day of 25 hours, a month of 31
// days), so that what outlives a window (a reservation, Limits.longestFill)
// lives long enough.
var calendarUnits = map[string]time.Duration{
	"s":  time.Second,
	"m":  time.Minute,
	"h":  time.Hour,
	"d":  25 * time.Hour,
	"w":  7*24*time.Hour + time.Hour,
	"mo": 31*24*time.Hour + time.Hour,
}

// maxCalendarAhead is the most windows after the one holding now that a
// job may be placed in (lua.MaxCalendar less the window before now and
// the last start, which only ends the window before it); fewer for
// windows shorter than calendarSkew, which pass more windows before now.
const maxCalendarAhead = lua.MaxCalendar - 3

// calendarSkew is the difference between a worker's clock, which computes
// the windows passed, and Redis TIME, which decides which of them holds
// now, that a calendar window always tolerates: the windows passed start
// at least that long before the worker's now and run at least that long
// after it. Past it a call fails as invalid (E_PERIOD) rather than count
// in the wrong window.
const calendarSkew = 5 * time.Second

// CalendarWindow returns the calendar window that admits at most n cost
// units in each window of unit ("s", "m", "h", "d", "w" or "mo") in time
// zone zone ("" for the Limiter's, Options.TimeZone).
func CalendarWindow(n int64, unit, zone string) Limit {
	return Limit{Rate: n, Period: calendarUnits[unit], Burst: n, Unit: unit, Zone: zone}
}

// deadLetterSuffix ends a calendar window that dead-letters the jobs over
// it (Limit.DeadLetter).
const deadLetterSuffix = ":dlq"

// ParseCalendar reads a calendar window written as N/UNIT[@ZONE][:dlq]
// (what follows "window:" in a spec): N from 1 to MaxRate, UNIT one of s,
// m, h, d, w (ISO weeks, from Monday) and mo (calendar months), ZONE an
// IANA time zone; :dlq dead-letters the jobs over the window.
func ParseCalendar(s string) (Limit, error) {
	spec := CalendarTerm + s
	s, dlq := strings.CutSuffix(strings.TrimSpace(s), deadLetterSuffix)
	nText, rest, ok := strings.Cut(s, "/")
	if !ok {
		return Limit{}, fmt.Errorf("%q: want %sN/UNIT[@ZONE], e.g. %s1000/d@Europe/Paris", spec, CalendarTerm, CalendarTerm)
	}
	n, err := parseCount(nText)
	if err != nil || n > MaxRate {
		return Limit{}, fmt.Errorf("%q: want N a whole number from 1 to %d", spec, MaxRate)
	}
	unit, zone, at := strings.Cut(rest, "@")
	if at && zone == "" {
		return Limit{}, fmt.Errorf("%q: want a time zone after @, e.g. %s1000/d@Europe/Paris", spec, CalendarTerm)
	}
	l := CalendarWindow(n, unit, zone)
	l.DeadLetter = dlq
	if err := l.Validate(); err != nil {
		return Limit{}, fmt.Errorf("%q: %w", spec, err)
	}
	return l, nil
}

// validateCalendar reports whether calendar window l can be enforced.
func (l Limit) validateCalendar() error {
	d, ok := calendarUnits[l.Unit]
	switch {
	case !ok:
		return fmt.Errorf("unit %q: want s, m, h, d, w or mo", l.Unit)
	case l.Rate < 1 || l.Rate > MaxRate:
		return fmt.Errorf("window of %d out of range [1, %d]", l.Rate, MaxRate)
	case l.Burst != l.Rate || l.Period != d || l.Sliding:
		return fmt.Errorf("window of %d/%s with burst %d, period %s: want %d and %s", l.Rate, l.Unit, l.Burst, l.Period, l.Rate, d)
	}
	if l.Zone != "" {
		// Local is the machine's zone: workers on machines set to other
		// zones would count one window's key between different boundaries.
		if l.Zone == "Local" {
			return fmt.Errorf("time zone %q: want an IANA time zone such as Europe/Paris, not the machine's", l.Zone)
		}
		if _, err := time.LoadLocation(l.Zone); err != nil {
			return fmt.Errorf("time zone %q: %w", l.Zone, err)
		}
	}
	return nil
}

// calendarString is l as ParseCalendar reads it.
func (l Limit) calendarString() string {
	s := fmt.Sprintf("%s%d/%s", CalendarTerm, l.Rate, l.Unit)
	if l.Zone != "" {
		s += "@" + l.Zone
	}
	if l.DeadLetter {
		s += deadLetterSuffix
	}
	return s
}

// calendars returns the calendar windows of ls.
func (ls Limits) calendars() Limits {
	out := make(Limits, 0, len(ls))
	for _, l := range ls {
		if l.Unit != "" {
			out = append(out, l)
		}
	}
	return out
}

// zone is the time zone of calendar window lim: its own, or the
// Limiter's. A zone that no longer loads (it was valid when parsed) is
// the Limiter's.
func (l *Limiter) zone(lim Limit) *time.Location {
	if lim.Zone == "" {
		return l.loc
	}
	if z, ok := l.zones.Load(lim.Zone); ok {
		return z.(*time.Location)
	}
	z, err := time.LoadLocation(lim.Zone)
	if err != nil {
		return l.loc
	}
	l.zones.Store(lim.Zone, z)
	return z
}

// windowStart is the start of the window of unit that holds t, in t's
// location. Seconds, minutes and hours are counted on the local clock
// from the offset in force at t; days, weeks and months by time.Date,
// which puts midnight where daylight saving leaves it.
func windowStart(unit string, t time.Time) time.Time {
	switch unit {
	case "s", "m", "h":
		d := int64(calendarUnits[unit] / time.Second)
		_, off := t.Zone()
		local := t.Unix() + int64(off)
		start := local - ((local%d)+d)%d
		return time.Unix(start-int64(off), 0).In(t.Location())
	case "w":
		y, m, day := t.Date()
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		return time.Date(y, m, day-back, 0, 0, 0, 0, t.Location())
	case "mo":
		y, m, _ := t.Date()
		return time.Date(y, m, 1, 0, 0, 0, 0, t.Location())
	}
	y, m, day := t.Date()
	return time.Date(y, m, day, 0, 0, 0, 0, t.Location())
}

// nextStart is the start of the window of unit after the one starting at
// s.
func nextStart(unit string, s time.Time) time.Time {
	switch unit {
	case "s", "m", "h":
		return s.Add(calendarUnits[unit])
	case "w":
		y, m, d := s.Date()
		return time.Date(y, m, d+7, 0, 0, 0, 0, s.Location())
	case "mo":
		y, m, _ := s.Date()
		return time.Date(y, m+1, 1, 0, 0, 0, 0, s.Location())
	}
	y, m, d := s.Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, s.Location())
}

// calendarStarts are the window starts passed for calendar window unit in
// loc at now: the window before now's, and any other that starts less
// than calendarSkew before now (room for a Redis clock behind this one),
// now's, and those after it up to the first that starts past now + the
// horizon (or calendarSkew, when longer), at least two; then the end of
// the last; lua.MaxCalendar starts at most.
func calendarStarts(unit string, loc *time.Location, now time.Time, horizon time.Duration) []time.Time {
	cur := windowStart(unit, now.In(loc))
	first := windowStart(unit, cur.Add(-time.Nanosecond))
	if s := windowStart(unit, now.Add(-calendarSkew).In(loc)); s.Before(first) {
		first = s
	}
	var out []time.Time
	for s := first; s.Before(cur); s = nextStart(unit, s) {
		out = append(out, s)
	}
	out = append(out, cur)
	s := cur
	for k := 0; len(out) < lua.MaxCalendar-1; k++ {
		s = nextStart(unit, s)
		out = append(out, s)
		if k >= 1 && s.After(now.Add(max(horizon, calendarSkew))) {
			break
		}
	}
	return append(out, nextStart(unit, s))
}

// calendarCurrent is the index in starts of the window holding now.
func calendarCurrent(starts []time.Time, now time.Time) int {
	for i := len(starts) - 2; i > 0; i-- {
		if !starts[i].After(now) {
			return i
		}
	}
	return 0
}

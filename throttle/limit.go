package throttle

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/throttler/throttler/lua"
)

// Bounds on the numbers a Limit may carry. They keep every product the Lua
// script computes (burst × period in microseconds) exactly representable in
// the double-precision numbers Redis' Lua uses (2^53).
const (
	// MaxRate is the largest Rate a Limit accepts.
	MaxRate = 1_000_000_000
	// MaxBurst is the largest Burst a Limit accepts.
	MaxBurst = 1_000_000_000
	// MinPeriod is the shortest Period a Limit accepts.
	MinPeriod = time.Millisecond
	// MaxPeriod is the longest Period a Limit accepts.
	MaxPeriod = 366 * 24 * time.Hour
	// MaxLimits is the most limits one tenant may have at once, sliding
	// windows included: the Redis functions' own bound.
	MaxLimits = lua.MaxLimits
	// MaxSliding is the largest N of a sliding window: a window keeps
	// each admission in its span in Redis, so N bounds what a span holds
	// and what one call drops (lua.MaxWindow).
	MaxSliding = lua.MaxWindow
	// maxExact is 2^53, the largest integer a Lua number holds exactly.
	maxExact = 1 << 53
)

// Limit is one token bucket: Rate tokens are added every Period, up to Burst
// tokens. A job of cost c takes c tokens. Limit is a value type, safe to copy.
type Limit struct {
	// Rate is the number of tokens added per Period; at least 1.
	Rate int64
	// Period is the time over which Rate tokens are added.
	Period time.Duration
	// Burst is the bucket's capacity: the most cost admitted at once.
	Burst int64
	// Sliding makes the limit a sliding window log rather than a token
	// bucket: at most Rate cost units are admitted in any span of Period,
	// exactly, and Burst equals Rate (see SlidingWindow).
	Sliding bool `json:",omitempty"`
	// Unit, when set, makes the limit a fixed calendar window: at most
	// Rate cost units in each window of the unit ("s", "m", "h", "d", "w"
	// or "mo") in time zone Zone; Burst equals Rate and Period is the
	// unit's longest window (see CalendarWindow).
	Unit string `json:",omitempty"`
	// Zone is a calendar window's IANA time zone; "" is the Limiter's
	// (Options.TimeZone).
	Zone string `json:",omitempty"`
	// DeadLetter, for a calendar window (written window:N/UNIT:dlq),
	// refuses a job over the window instead of reserving it a later one:
	// the job is Limited, uncharged, until the window resets, and a worker
	// dead-letters it.
	DeadLetter bool `json:",omitempty"`
}

// SlidingWindow returns the sliding window that admits at most n cost
// units in any span of d ("sliding:N/DURATION").
func SlidingWindow(n int64, d time.Duration) Limit {
	return Limit{Rate: n, Period: d, Burst: n, Sliding: true}
}

// PerSecond returns a Limit of rate per second with a burst of burst.
func PerSecond(rate, burst int64) Limit { return Limit{Rate: rate, Period: time.Second, Burst: burst} }

// PerMinute returns a Limit of rate per minute with a burst of burst.
func PerMinute(rate, burst int64) Limit { return Limit{Rate: rate, Period: time.Minute, Burst: burst} }

// PerHour returns a Limit of rate per hour with a burst of burst.
func PerHour(rate, burst int64) Limit { return Limit{Rate: rate, Period: time.Hour, Burst: burst} }

// PerDay returns a Limit of rate per day with a burst of burst.
func PerDay(rate, burst int64) Limit { return Limit{Rate: rate, Period: 24 * time.Hour, Burst: burst} }

// periodMicros returns the Period in whole microseconds.
func (l Limit) periodMicros() int64 { return l.Period.Microseconds() }

// Validate reports whether l can be enforced, and why not.
func (l Limit) Validate() error {
	if l.Unit != "" {
		return l.validateCalendar()
	}
	if l.DeadLetter {
		return fmt.Errorf("%s: only a calendar window (%sN/UNIT:dlq) dead-letters the jobs over it", l, CalendarTerm)
	}
	if l.Sliding {
		// No token arithmetic: burst × period is not bounded.
		switch {
		case l.Rate < 1 || l.Rate > MaxSliding:
			return fmt.Errorf("sliding window of %d out of range [1, %d]", l.Rate, MaxSliding)
		case l.Burst != l.Rate:
			return fmt.Errorf("sliding window of %d with a burst of %d: want the same", l.Rate, l.Burst)
		case l.Period < MinPeriod || l.Period > MaxPeriod:
			return fmt.Errorf("span %s out of range [%s, %s]", l.Period, MinPeriod, MaxPeriod)
		case l.Period%time.Microsecond != 0:
			return fmt.Errorf("span %s is not a whole number of microseconds", l.Period)
		}
		return nil
	}
	switch {
	case l.Rate < 1 || l.Rate > MaxRate:
		return fmt.Errorf("rate %d out of range [1, %d]", l.Rate, MaxRate)
	case l.Period < MinPeriod || l.Period > MaxPeriod:
		return fmt.Errorf("period %s out of range [%s, %s]", l.Period, MinPeriod, MaxPeriod)
	case l.Period%time.Microsecond != 0:
		return fmt.Errorf("period %s is not a whole number of microseconds", l.Period)
	case l.Burst < 1 || l.Burst > MaxBurst:
		return fmt.Errorf("burst %d out of range [1, %d]", l.Burst, MaxBurst)
	case l.Burst > (maxExact-1)/l.periodMicros():
		return fmt.Errorf("burst %d × period %s is too large", l.Burst, l.Period)
	}
	return nil
}

// String formats l the way ParseLimit reads it, e.g. "100/s:200".
func (l Limit) String() string {
	unit := ""
	switch l.Period {
	case time.Second:
		unit = "s"
	case time.Minute:
		unit = "m"
	case time.Hour:
		unit = "h"
	case 24 * time.Hour:
		unit = "d"
	default:
		unit = l.Period.String()
	}
	if l.Unit != "" {
		return l.calendarString()
	}
	if l.Sliding {
		return fmt.Sprintf("%s%d/%s", SlidingTerm, l.Rate, unit)
	}
	return fmt.Sprintf("%d/%s:%d", l.Rate, unit, l.Burst)
}

// Limits is a set of limits that all apply to one tenant: a job is admitted
// only when every one of them admits it.
type Limits []Limit

// Validate reports whether every limit in ls can be enforced.
func (ls Limits) Validate() error {
	if len(ls) == 0 {
		return errors.New("no limit given")
	}
	if len(ls) > MaxLimits {
		return fmt.Errorf("%d limits given, at most %d allowed", len(ls), MaxLimits)
	}
	for i, l := range ls {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("limit %s: %w", l, err)
		}
		// A tenant's bucket of a limit is named by its period, so that a
		// changed rate keeps its bucket: one limit per period (and one
		// sliding window per span, named the same way).
		for _, o := range ls[:i] {
			if o.Period == l.Period && o.Sliding == l.Sliding && o.Unit == "" && l.Unit == "" {
				return fmt.Errorf("limits %s and %s have the same period: keep one", o, l)
			}
			// A calendar window is named by its unit and zone.
			if o.Unit != "" && o.Unit == l.Unit && o.Zone == l.Zone {
				return fmt.Errorf("limits %s and %s have the same period: keep one", o, l)
			}
		}
	}
	return nil
}

// MinBurst is the smallest burst in ls: the largest cost a job may have and
// still be admissible. It is 0 for an empty set.
func (ls Limits) MinBurst() int64 {
	var m int64
	for i, l := range ls {
		if i == 0 || l.Burst < m {
			m = l.Burst
		}
	}
	return m
}

// String formats ls the way ParsePolicy reads it, e.g. "100/s:200+50000/d:50000".
func (ls Limits) String() string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = l.String()
	}
	return strings.Join(parts, "+")
}

// ParseLimit reads one limit written as RATE/UNIT or RATE/UNIT:BURST, where
// UNIT is s, m, h or d (or a Go duration such as 10s). A limit written
// without a burst gets defaultBurst, or its own rate when defaultBurst is 0.
func ParseLimit(s string, defaultBurst int64) (Limit, error) {
	spec, burstText, hasBurst := strings.Cut(strings.TrimSpace(s), ":")
	rateText, unit, ok := strings.Cut(spec, "/")
	if !ok {
		return Limit{}, fmt.Errorf("limit %q: want RATE/UNIT[:BURST], e.g. 100/s:200", s)
	}
	rate, err := parseCount(rateText)
	if err != nil {
		return Limit{}, fmt.Errorf("limit %q: rate: %w", s, err)
	}
	period, err := parseUnit(unit)
	if err != nil {
		return Limit{}, fmt.Errorf("limit %q: %w", s, err)
	}
	l := Limit{Rate: rate, Period: period, Burst: defaultBurst}
	if hasBurst {
		if l.Burst, err = parseCount(burstText); err != nil {
			return Limit{}, fmt.Errorf("limit %q: burst: %w", s, err)
		}
	} else if l.Burst == 0 {
		l.Burst = rate
	}
	if err := l.Validate(); err != nil {
		return Limit{}, fmt.Errorf("limit %q: %w", s, err)
	}
	return l, nil
}

// ParseSliding reads a sliding window written as N/DURATION (what follows
// "sliding:" in a spec), where DURATION is s, m, h, d or a Go duration
// such as 10s or 1m30s, and N is from 1 to MaxSliding.
func ParseSliding(s string) (Limit, error) {
	nText, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Limit{}, fmt.Errorf("%q: want %sN/DURATION, e.g. %s100/1m", SlidingTerm+s, SlidingTerm, SlidingTerm)
	}
	n, err := parseCount(nText)
	if err != nil || n > MaxSliding {
		return Limit{}, fmt.Errorf("%q: want %sN/DURATION, N a whole number from 1 to %d", SlidingTerm+s, SlidingTerm, MaxSliding)
	}
	d, err := parseUnit(unit)
	if err != nil {
		return Limit{}, fmt.Errorf("%q: %w", SlidingTerm+s, err)
	}
	l := SlidingWindow(n, d)
	if err := l.Validate(); err != nil {
		return Limit{}, fmt.Errorf("%q: %w", SlidingTerm+s, err)
	}
	return l, nil
}

// buckets returns the token buckets of ls, without its sliding windows:
// what Hold and Carry move.
func (ls Limits) buckets() Limits {
	out := make(Limits, 0, len(ls))
	for _, l := range ls {
		if !l.Sliding && l.Unit == "" {
			out = append(out, l)
		}
	}
	return out
}

// hasWindow reports whether some of ls are sliding windows.
func (ls Limits) hasWindow() bool {
	for _, l := range ls {
		if l.Sliding || l.Unit != "" {
			return true
		}
	}
	return false
}

// windows returns the sliding windows of ls: what Carry carries apart
// from the buckets.
func (ls Limits) windows() Limits {
	out := make(Limits, 0, len(ls))
	for _, l := range ls {
		if l.Sliding && l.Unit == "" {
			out = append(out, l)
		}
	}
	return out
}

// parseCount reads a positive decimal integer with no sign, exponent or
// fraction.
func parseCount(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a positive whole number", s)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%q is not a positive whole number in range", s)
	}
	return n, nil
}

// parseUnit reads s, m, h, d, or a Go duration, as a period.
func parseUnit(u string) (time.Duration, error) {
	switch strings.TrimSpace(u) {
	case "s":
		return time.Second, nil
	case "m":
		return time.Minute, nil
	case "h":
		return time.Hour, nil
	case "d":
		return 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(u))
	if err != nil {
		return 0, fmt.Errorf("unit %q: want s, m, h, d or a duration such as 10s", u)
	}
	if d <= 0 {
		// A duration, but none a period can be: saying "want a duration"
		// of 0s would send the reader looking for a typo.
		return 0, fmt.Errorf("duration %q: want one above 0, such as 10s", u)
	}
	return d, nil
}

// longestFill is the longest time any of the limits takes to refill from
// empty, rounded up to the microsecond.
func (ls Limits) longestFill() time.Duration {
	var longest int64
	for _, lim := range ls {
		// burst*period < 2^53 µs (Limit.Validate), so this cannot overflow.
		fill := (lim.Burst*lim.periodMicros() + lim.Rate - 1) / lim.Rate
		longest = max(longest, fill)
	}
	return time.Duration(longest) * time.Microsecond
}

package fastlane

import (
	"testing"
	"time"
)

// TestLanePause: while arrivals come in, the deciding loop puts jobs off at no
// more than MoveRate a second, counting the time it spent deciding (up to
// paceSlack) and banking nothing while idle; it never waits after a group
// mostly admitted, once arrivals have stopped for paceWindow, or with
// MoveRate < 0.
func TestLanePause(t *testing.T) {
	// At 8,000 a second a deferral takes 125µs: 8ms for 64.
	type step struct {
		after             time.Duration // since the step before
		arrived           bool          // a job arrives at this step
		deferred, decided int
		want              time.Duration
		why               string
	}
	for _, tc := range []struct {
		name     string
		moveRate int
		steps    []step
	}{
		{"the pace over time", 8000, []step{
			{0, true, 64, 64, 8 * time.Millisecond, "64 deferred"},
			// The next group is decided 2ms after the pause ended: the 2ms
			// count towards the pace.
			{2 * time.Millisecond, false, 64, 64, 6 * time.Millisecond, "64 more after 2ms spent deciding"},
			{0, false, 40, 64, 5 * time.Millisecond, "40 of 64 at once"},
			// Deciding took longer than the group's share of the pace, but
			// within paceSlack: the loop is behind, and catches up.
			{9 * time.Millisecond, false, 8, 8, 0, "8 after 9ms spent deciding"},
			{0, false, 64, 64, 0, "64 more at once, 8ms behind"},
			{0, false, 64, 64, 8 * time.Millisecond, "64 more at once, on pace"},
			// In all, 304 jobs in 38ms: 8,000 a second.
		}},
		{"slack", 8000, []step{
			{0, true, 128, 128, 16 * time.Millisecond, "128 deferred"},
			// Deciding took paceSlack past the pause: it all counts.
			{paceSlack, false, 128, 128, 16*time.Millisecond - paceSlack, "128 more, paceSlack behind"},
			// Deciding took longer than paceSlack: a fresh start.
			{paceSlack + time.Nanosecond, false, 128, 128, 16 * time.Millisecond, "128 more, over paceSlack behind"},
		}},
		{"nothing banked after idling", 8000, []step{
			{0, true, 64, 64, 8 * time.Millisecond, "64 deferred"},
			{500 * time.Millisecond, false, 32, 40, 4 * time.Millisecond, "32 of 40 after idling 500ms"},
			{0, false, 8, 8, time.Millisecond, "8 more at once"},
		}},
		{"mostly admitted", 8000, []step{
			{0, true, 64, 64, 8 * time.Millisecond, "64 deferred"},
			{0, false, 10, 64, 0, "10 of 64 deferred"},
			{0, false, 32, 64, 0, "half deferred"},
			{0, false, 0, 0, 0, "nothing decided"},
			// The pace starts afresh after an unpaused group.
			{0, false, 33, 64, 33 * 125 * time.Microsecond, "33 of 64 deferred"},
		}},
		{"arrivals stopped", 8000, []step{
			{0, true, 64, 64, 8 * time.Millisecond, "64 deferred"},
			{paceWindow - 8*time.Millisecond, false, 64, 64, 8 * time.Millisecond, "paceWindow after the last arrival"},
			{0, false, 64, 64, 0, "past paceWindow after the last arrival"},
			{time.Second, true, 64, 64, 8 * time.Millisecond, "a job arrives again"},
		}},
		{"no arrival ever", 8000, []step{
			{0, false, 64, 64, 0, "64 deferred"},
		}},
		{"no cap", -1, []step{
			{0, true, 64, 64, 0, "64 deferred"},
			{0, true, 64, 64, 0, "64 more"},
		}},
		{"slower pace", 1000, []step{
			{0, true, 64, 64, 64 * time.Millisecond, "64 deferred at 1,000/s"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newTestLane(t, 5000, func(c *Config) { c.MoveRate = tc.moveRate })
			for i, s := range tc.steps {
				l.clock.Advance(s.after)
				if s.arrived {
					l.arrived.Store(l.clock.Now().UnixNano())
				}
				if got := l.Pause(s.deferred, s.decided); got != s.want {
					t.Fatalf("step %d (%s): paused %v, want %v", i, s.why, got, s.want)
				}
				// The deciding loop waits out its pause.
				l.clock.Advance(s.want)
			}
		})
	}
}

// TestLanePauseHoldsMoveRate: a deciding loop that defers every job it
// decides, deciding each group faster than the pace, defers at MoveRate
// over a long run: the time it spent deciding is part of each pause.
func TestLanePauseHoldsMoveRate(t *testing.T) {
	for _, deciding := range []time.Duration{0, time.Millisecond, 7 * time.Millisecond} {
		l := newTestLane(t, 5000, func(c *Config) { c.MoveRate = 8000 })
		start := l.clock.Now()
		const groups, group = 1000, 64
		for range groups {
			l.clock.Advance(deciding)
			l.arrived.Store(l.clock.Now().UnixNano()) // jobs keep arriving
			l.clock.Advance(l.Pause(group, group))
		}
		// The pace starts after the first group is decided.
		got := l.clock.Now().Sub(start) - deciding
		if want := groups * group * time.Second / 8000; got != want {
			t.Errorf("deciding a group in %v: deferred %d jobs in %v, want %v (8,000/s)", deciding, groups*group, got, want)
		}
	}
}

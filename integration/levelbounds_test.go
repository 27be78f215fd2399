package integration

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// levelBound is a limit above the tenant as the downstream sees it: its
// level's name, its rate a second (with a burst of as many, as
// THROTTLER_DEFAULT_BURST unset gives), and the tenants whose jobs it
// bounds (none: every tenant's).
type levelBound struct {
	name    string
	rate    float64
	tenants []string
}

// arrivalJitter is how much later than its slot a job may reach the
// downstream (the worker's timer, NATS, a woken job's redelivery). A job
// late by that much lands among the next slots' jobs, so a level's jobs
// may reach the downstream up to rate × arrivalJitter beyond its burst
// with no job admitted early.
const arrivalJitter = 100 * time.Millisecond

// overRate is the most jobs of sorted ts in any span [ts[i], ts[j]]
// beyond what rate allows over it: the largest (j-i+1) - rate × (ts[j] -
// ts[i]). A bucket of that rate and burst B, never over-admitted, keeps
// it at most B: full at ts[i], it holds B and refills rate × (ts[j] -
// ts[i]) more by ts[j]. Computed in one pass, as (j - rate × ts[j]) less
// the lowest (i - rate × ts[i]) before it, plus one.
func overRate(ts []time.Time, rate float64) float64 {
	best, low := math.Inf(-1), math.Inf(1)
	for j, t := range ts {
		x := float64(j) - rate*t.Sub(ts[0]).Seconds()
		low = min(low, x)
		best = max(best, x-low+1)
	}
	return best
}

// mostWithin is the most times of sorted ts within any span of d.
func mostWithin(ts []time.Time, d time.Duration) int {
	most := 0
	for i, j := 0, 0; i < len(ts); i++ {
		for ts[j].Before(ts[i].Add(-d)) {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// levelCheck is what the downstream saw of one level's jobs.
type levelCheck struct {
	levelBound
	jobs   int
	over   float64 // overRate of their first requests
	second int     // the most in any second
}

// allowed is the most over the level may show without over-admitting:
// its burst, plus the jitter of the arrivals, plus one job for rounding.
func (c levelCheck) allowed() float64 { return c.rate + c.rate*arrivalJitter.Seconds() + 1 }

// ok reports whether the level was not over-admitted.
func (c levelCheck) ok() bool { return c.over <= c.allowed() }

// String says what the downstream saw against the level's bound.
func (c levelCheck) String() string {
	return fmt.Sprintf("%s: %d jobs, at most %d in a second, %.1f over %g/s (burst %g, allowed %.0f)",
		c.name, c.jobs, c.second, c.over, c.rate, c.rate, c.allowed())
}

// checkLevel reads the first requests of the level's tenants from calls.
func checkLevel(calls []call, lb levelBound) levelCheck {
	var ts []time.Time
	for _, c := range calls {
		if c.Attempt == 1 && (len(lb.tenants) == 0 || slices.Contains(lb.tenants, c.Tenant)) {
			ts = append(ts, c.Arrived)
		}
	}
	slices.SortFunc(ts, time.Time.Compare)
	out := levelCheck{levelBound: lb, jobs: len(ts)}
	if len(ts) > 0 {
		out.over, out.second = overRate(ts, lb.rate), mostWithin(ts, time.Second)
	}
	return out
}

package integration

import (
	"sort"
	"time"
)

// fleetTenant is one tenant of the fleet benchmark: its limit, in jobs a
// second with a burst of as many, and published at three times it.
type fleetTenant struct {
	name  string
	limit float64
}

// publishRate is how many jobs a second the tenant is published at.
func (t fleetTenant) publishRate() float64 { return 3 * t.limit }

// fleetWindow is a span of the run around a failover, from the moment a
// server is stopped to a few seconds after the cluster recovered.
type fleetWindow struct {
	name     string
	from, to time.Time
}

// countIn counts the times of sorted ts in [from, to).
func countIn(ts []time.Time, from, to time.Time) int {
	lo := sort.Search(len(ts), func(i int) bool { return !ts[i].Before(from) })
	hi := sort.Search(len(ts), func(i int) bool { return !ts[i].Before(to) })
	return max(0, hi-lo)
}

// cleanRate is the rate of sorted ts over [from, to) leaving the windows
// out: the jobs in what remains over the time that remains.
func cleanRate(ts []time.Time, from, to time.Time, windows []fleetWindow) (rate float64, jobs int, span time.Duration) {
	segments := [][2]time.Time{{from, to}}
	for _, w := range windows {
		var next [][2]time.Time
		for _, s := range segments {
			if !w.from.After(s[0]) && !w.to.Before(s[1]) {
				continue // the window covers the segment
			}
			if w.to.Before(s[0]) || !w.from.Before(s[1]) {
				next = append(next, s) // apart
				continue
			}
			if w.from.After(s[0]) {
				next = append(next, [2]time.Time{s[0], w.from})
			}
			if w.to.Before(s[1]) {
				next = append(next, [2]time.Time{w.to, s[1]})
			}
		}
		segments = next
	}
	for _, s := range segments {
		jobs += countIn(ts, s[0], s[1])
		span += s[1].Sub(s[0])
	}
	if span <= 0 {
		return 0, jobs, 0
	}
	return float64(jobs) / span.Seconds(), jobs, span
}

// windowExcess is what a tenant of limit (and burst) limit was admitted
// across w beyond what its bucket allows over w from full: limit × w +
// burst. Negative: under the bound.
func windowExcess(ts []time.Time, w fleetWindow, limit float64) (admitted int, bound, excess float64) {
	admitted = countIn(ts, w.from, w.to)
	bound = limit*w.to.Sub(w.from).Seconds() + limit
	return admitted, bound, float64(admitted) - bound
}

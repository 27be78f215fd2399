package integration

import (
	"slices"
	"sort"
	"testing"
	"time"
)

// Limits above the tenant (issue 28): THROTTLER_GLOBAL_LIMIT bounds all
// tenants' jobs together, and a flood waits its turn under it rather than
// reserving it ahead of every other tenant.

// TestGlobalLimitSharedFairly: three worker processes under a global
// 40/s. acme's backlog of 800 jobs is published before they start, with
// no limit of its own that binds; globex and initech publish 4 jobs a
// second each for 10 s meanwhile. The downstream never sees more than
// the global bucket allows in any second (40 and its burst of 40), acme
// gets the rest of it while globex and initech get all they ask for, at
// once: each of their jobs reaches the downstream within a second of its
// publish at the 99th percentile (the figure, 250 ms, is measured by
// BenchmarkGlobalLimit). Every job is sent once.
func TestGlobalLimitSharedFairly(t *testing.T) {
	const rate, backlog = 40, 800
	f := startHTTPFleet(t, downstreamOptions{Took: map[string]time.Duration{allTenants: 5 * time.Millisecond}},
		map[string]string{"THROTTLER_GLOBAL_LIMIT": "40/s", "THROTTLER_DEFAULT_LIMIT": "1000/s"})
	f.e.ensureStream(f.cfg)
	acme := f.publish("acme", backlog)
	f.start(fleetSize)
	p := f.publishPaced(map[string]int{"globex": 4, "initech": 4}, 10*time.Second)
	quiet := p.wait(t)
	all := slices.Concat(acme, quiet["globex"], quiet["initech"])
	f.waitAnsweredOK(all, time.Duration(len(all))*time.Second/rate+60*time.Second)

	calls := f.ds.calls()
	var starts []time.Time
	first := map[string]time.Time{}
	for _, c := range calls {
		if c.Attempt != 1 {
			continue
		}
		starts = append(starts, c.Arrived)
		if at, ok := p.at[c.Key]; ok {
			first[c.Key] = at
		}
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	most := 0
	for i, j := 0, 0; i < len(starts); i++ {
		for starts[j].Before(starts[i].Add(-time.Second)) {
			j++
		}
		most = max(most, i-j+1)
	}
	var waits []time.Duration
	for _, c := range calls {
		if at, ok := first[c.Key]; ok && c.Attempt == 1 {
			waits = append(waits, c.Arrived.Sub(at))
		}
	}
	slices.Sort(waits)
	p99 := waits[len(waits)*99/100]
	span := starts[len(starts)-1].Sub(starts[0])
	t.Logf("%d jobs over %s (%.1f/s); at most %d in a second; globex and initech: %d jobs, wait p50 %s, p99 %s, max %s",
		len(starts), span.Round(time.Millisecond), float64(len(starts)-rate)/span.Seconds(), most, len(waits),
		waits[len(waits)/2].Round(time.Millisecond), p99.Round(time.Millisecond), waits[len(waits)-1].Round(time.Millisecond))
	if most > 2*rate+2 {
		t.Errorf("%d jobs reached the downstream within one second, the global bucket allows %d and its burst %d", most, rate, rate)
	}
	if got := float64(len(starts)-rate) / span.Seconds(); got > rate*1.05 {
		t.Errorf("%.1f jobs a second over the run, past the global %d/s", got, rate)
	}
	if p99 > time.Second {
		t.Errorf("globex's and initech's jobs waited %s at the 99th percentile behind acme's backlog, want at most 1s", p99)
	}
	if dups := f.ds.duplicates(); len(dups) != 0 {
		t.Errorf("keys sent more than once: %v", dups)
	}
}

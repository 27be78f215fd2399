package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// BenchmarkGlobalLimit measures the figures of the limits above the
// tenant (issue 28) with three worker processes and a downstream that
// answers in 5 ms, over the first 60 s of each run (from 5 s after the
// first request, past the buckets' first burst):
//
//   - global: THROTTLER_GLOBAL_LIMIT=100/s. acme's backlog of 20,000
//     jobs is published before the workers start, with no limit of its
//     own that binds; globex and initech publish 10 jobs a second each,
//     under their own 50/s. The total admitted, each tenant's share, the
//     quiet tenants' waits from publish to the downstream (of the jobs
//     published in the window, and of all), and acme's deliveries per
//     job.
//   - groups: org-1=60/s over t1, t2 and t3, each offered 50/s, and
//     org-2=60/s over t4, offered 10/s, under a global 100/s.
//   - groups-global-binding: the same groups, t4 offered 50/s, under a
//     global 60/s.
//   - groups-backlogs: under a global 60/s alone, org-1's a1 and a2 and
//     org-2's b1 each have a backlog of 2,400 jobs, published one
//     after the other before the workers start: the groups share evenly
//     however their tenants' backlogs were queued.
//   - group-after-global: org-1=20/s over a1, offered 40/s, shares a
//     global 30/s with org-2's b1, a backlog of 420 jobs done in about
//     28 s: once the global limit stops binding, org-1 runs at its own
//     20/s, not above it on grants kept while it waited for turns.
//   - group-binding-after-global: the same, b1 offered 30/s for the
//     window instead: org-1's jobs wait at their group, then at the
//     global level, and org-1 still keeps its 20/s once b1 is done.
//
// Each variant runs on a single Redis (VARIANT/single) and on a Redis
// Cluster of three masters (VARIANT/cluster), where each level's keys
// and each tenant's live in slots of their own. Every run also reports,
// for each level, the most its jobs reached the downstream beyond its
// rate over any span of the whole run (levelCheck), and fails when that
// passes the level's burst: a level over-admitted. Every job is then
// waited for: nothing is lost. Run one variant on the cluster with
//
//	go test -run '^$' -bench 'GlobalLimit/^global$/cluster' -benchtime 1x -timeout 40m ./integration/
//
// ('GlobalLimit//single' for every variant on a single Redis; each run
// takes 3 to 4 minutes).
func BenchmarkGlobalLimit(b *testing.B) {
	orgs := map[string]string{"t1": "org-1", "t2": "org-1", "t3": "org-1", "t4": "org-2"}
	for _, v := range []levelRun{
		{name: "global", global: 100, vars: map[string]string{"THROTTLER_TENANT_LIMITS": "globex=50/s,initech=50/s"},
			backlog: map[string]int{"acme": 20000}, paced: map[string]int{"globex": 10, "initech": 10}},
		{name: "groups", global: 100, groupLimits: map[string]float64{"org-1": 60, "org-2": 60},
			paced: map[string]int{"t1": 50, "t2": 50, "t3": 50, "t4": 10}, groups: orgs},
		{name: "groups-global-binding", global: 60, groupLimits: map[string]float64{"org-1": 60, "org-2": 60},
			paced: map[string]int{"t1": 50, "t2": 50, "t3": 50, "t4": 50}, groups: orgs},
		{name: "groups-backlogs", global: 60, backlog: map[string]int{"a1": 2400, "a2": 2400, "b1": 2400},
			groups: map[string]string{"a1": "org-1", "a2": "org-1", "b1": "org-2"}},
		{name: "group-after-global", global: 30, groupLimits: map[string]float64{"org-1": 20},
			backlog: map[string]int{"b1": 420}, paced: map[string]int{"a1": 40},
			groups: map[string]string{"a1": "org-1", "b1": "org-2"}},
		{name: "group-binding-after-global", global: 30, groupLimits: map[string]float64{"org-1": 20},
			paced: map[string]int{"a1": 40, "b1": 30}, groups: map[string]string{"a1": "org-1", "b1": "org-2"}},
	} {
		b.Run(v.name, func(b *testing.B) {
			for _, redis := range []string{"single", "cluster"} {
				b.Run(redis, func(b *testing.B) {
					for range b.N {
						v.run(b, redis == "cluster")
					}
				})
			}
		})
	}
}

// levelRun is one variant of BenchmarkGlobalLimit.
type levelRun struct {
	name        string
	global      float64            // THROTTLER_GLOBAL_LIMIT, jobs a second
	groupLimits map[string]float64 // THROTTLER_GROUP_LIMITS, jobs a second
	vars        map[string]string  // the workers' other variables
	backlog     map[string]int     // jobs published before the workers start, by tenant in name order
	paced       map[string]int     // jobs a second published for the window
	groups      map[string]string  // a tenant's group, sent in the Org header
}

// settings are the workers' variables of the run: its levels, read from
// the Org header when it has groups, over its own vars.
func (v levelRun) settings() map[string]string {
	vars := map[string]string{"THROTTLER_DEFAULT_LIMIT": "100000/s", "THROTTLER_GLOBAL_LIMIT": fmt.Sprintf("%g/s", v.global)}
	if len(v.groups) > 0 {
		vars["THROTTLER_GROUP_FROM"] = "header:Org"
	}
	if len(v.groupLimits) > 0 {
		var specs []string
		for g, r := range v.groupLimits {
			specs = append(specs, fmt.Sprintf("%s=%g/s", g, r))
		}
		sort.Strings(specs)
		vars["THROTTLER_GROUP_LIMITS"] = strings.Join(specs, ",")
	}
	for k, x := range v.vars {
		vars[k] = x
	}
	return vars
}

// bounds are the run's levels as the downstream sees them.
func (v levelRun) bounds() []levelBound {
	out := []levelBound{{name: "_global", rate: v.global}}
	for g, r := range v.groupLimits {
		lb := levelBound{name: "group." + g, rate: r}
		for tenant, tg := range v.groups {
			if tg == g {
				lb.tenants = append(lb.tenants, tenant)
			}
		}
		out = append(out, lb)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// levelWindow is how long a run publishes and is measured.
const levelWindow = 60 * time.Second

func (v levelRun) run(b *testing.B, cluster bool) {
	vars := v.settings()
	if cluster {
		cv, _ := redisClusterVars(b)
		maps.Copy(vars, cv)
	}
	f := startHTTPFleet(b, downstreamOptions{Took: map[string]time.Duration{allTenants: 5 * time.Millisecond}}, vars)
	f.e.ensureStream(f.cfg)
	var all []string
	for _, tenant := range slices.Sorted(maps.Keys(v.backlog)) {
		var hdr nats.Header
		if g := v.groups[tenant]; g != "" {
			hdr = nats.Header{"Org": []string{g}}
		}
		all = append(all, f.publishWith(tenant, hdr, v.backlog[tenant])...)
	}
	f.start(fleetSize)
	pub := publishWithGroups(b, f, v.paced, v.groups, levelWindow)
	all = append(all, pub.ids...)
	f.waitAnsweredOK(all, 15*time.Minute)

	calls := f.ds.calls()
	first := time.Time{}
	for _, c := range calls {
		if first.IsZero() || c.Arrived.Before(first) {
			first = c.Arrived
		}
	}
	from, to := first.Add(5*time.Second), first.Add(levelWindow)
	per := map[string]int{}
	total := 0
	// The quiet tenants' waits: of the jobs published in the window (the
	// figure), and of all their jobs, those of the workers' start-up too.
	waits, allWaits := map[string][]time.Duration{}, map[string][]time.Duration{}
	for _, c := range calls {
		if c.Attempt != 1 {
			continue
		}
		if at, ok := pub.at[c.Key]; ok {
			allWaits[c.Tenant] = append(allWaits[c.Tenant], c.Arrived.Sub(at))
			if !at.Before(from) && at.Before(to) {
				waits[c.Tenant] = append(waits[c.Tenant], c.Arrived.Sub(at))
			}
		}
		if c.Arrived.Before(from) || !c.Arrived.Before(to) {
			continue
		}
		per[c.Tenant]++
		total++
	}
	secs := to.Sub(from).Seconds()
	b.ReportMetric(float64(total)/secs, "admitted/s")
	tenants := make([]string, 0, len(per))
	for t := range per {
		tenants = append(tenants, t)
	}
	sort.Strings(tenants)
	line := fmt.Sprintf("%s: %.1f/s in all;", b.Name(), float64(total)/secs)
	for _, t := range tenants {
		r := float64(per[t]) / secs
		b.ReportMetric(r, t+"/s")
		line += fmt.Sprintf(" %s %.1f/s", t, r)
		if ws := waits[t]; len(ws) > 0 && v.paced[t] > 0 && len(v.backlog) > 0 {
			slices.Sort(ws)
			p99 := ws[len(ws)*99/100]
			b.ReportMetric(float64(p99.Milliseconds()), t+"-wait-p99-ms")
			all := allWaits[t]
			slices.Sort(all)
			line += fmt.Sprintf(" (wait of the window's jobs p50 %s, p99 %s; of all its jobs p99 %s)", ws[len(ws)/2].Round(time.Millisecond),
				p99.Round(time.Millisecond), all[len(all)*99/100].Round(time.Millisecond))
		}
	}
	// NATS deliveries, of the jobs consumer and of the woken jobs',
	// counted by the server.
	f.waitSettled(time.Minute)
	delivered := f.e.consumerInfo(f.cfg.Stream, f.cfg.Consumer).Delivered.Consumer +
		f.e.consumerInfo(f.cfg.Stream, f.cfg.Consumer+"_woken").Delivered.Consumer
	d := float64(delivered) / float64(len(all))
	b.ReportMetric(d, "deliveries/job")
	line += fmt.Sprintf("; %.3f NATS deliveries a job (%d for %d jobs)", d, delivered, len(all))
	for _, lb := range v.bounds() {
		c := checkLevel(calls, lb)
		b.ReportMetric(c.over, lb.name+"-over-rate")
		line += "; " + c.String()
		if !c.ok() {
			b.Errorf("%s over-admitted: %s", lb.name, c)
		}
	}
	if dups := f.ds.duplicates(); len(dups) != 0 {
		b.Errorf("keys sent more than once: %d", len(dups))
	}
	b.Log(line)
}

// groupPublisher is what publishWithGroups published: the ids, and when
// each was acked.
type groupPublisher struct {
	ids []string
	at  map[string]time.Time
}

// publishWithGroups publishes perSecond jobs a second of each tenant for
// d, in 20 ms ticks, each with its tenant's group in the Org header, and
// returns once done.
func publishWithGroups(b testing.TB, f *httpFleet, perSecond map[string]int, groups map[string]string, d time.Duration) groupPublisher {
	out := groupPublisher{at: map[string]time.Time{}}
	var mu sync.Mutex
	const tick = 20 * time.Millisecond
	start := time.Now()
	sent := map[string]int{}
	for i := 1; time.Duration(i)*tick <= d; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * tick)))
		for tenant, rate := range perSecond {
			for sent[tenant] < rate*i*int(tick/time.Millisecond)/1000 {
				m := &nats.Msg{Subject: "jobs." + tenant, Data: []byte("job"), Header: nats.Header{}}
				if g := groups[tenant]; g != "" {
					m.Header.Set("Org", g)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				ack, err := f.e.js.PublishMsg(ctx, m)
				cancel()
				if err != nil {
					b.Fatalf("publish to %s: %v", tenant, err)
				}
				id := jobID(f.cfg.Stream, ack.Sequence)
				mu.Lock()
				out.ids = append(out.ids, id)
				out.at[id] = time.Now()
				mu.Unlock()
				sent[tenant]++
			}
		}
	}
	return out
}

package integration

import (
	"context"
	"fmt"
	"slices"
	"sort"
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
//     quiet tenants' waits from publish to the downstream, and acme's
//     deliveries per job.
//   - groups: org-1=60/s over t1, t2 and t3, each offered 50/s, and
//     org-2=60/s over t4, offered 10/s, under a global 100/s.
//   - groups-global-binding: the same groups, t4 offered 50/s, under a
//     global 60/s.
//
// Every job is then waited for: nothing is lost. Run it with
//
//	go test -run '^$' -bench GlobalLimit -benchtime 1x -timeout 30m ./integration/
func BenchmarkGlobalLimit(b *testing.B) {
	for _, v := range []levelRun{
		{name: "global", vars: map[string]string{"THROTTLER_GLOBAL_LIMIT": "100/s", "THROTTLER_TENANT_LIMITS": "globex=50/s,initech=50/s"},
			backlog: map[string]int{"acme": 20000}, paced: map[string]int{"globex": 10, "initech": 10}},
		{name: "groups", vars: map[string]string{"THROTTLER_GLOBAL_LIMIT": "100/s", "THROTTLER_GROUP_FROM": "header:Org",
			"THROTTLER_GROUP_LIMITS": "org-1=60/s,org-2=60/s"},
			paced: map[string]int{"t1": 50, "t2": 50, "t3": 50, "t4": 10}, groups: map[string]string{"t1": "org-1", "t2": "org-1", "t3": "org-1", "t4": "org-2"}},
		{name: "groups-global-binding", vars: map[string]string{"THROTTLER_GLOBAL_LIMIT": "60/s", "THROTTLER_GROUP_FROM": "header:Org",
			"THROTTLER_GROUP_LIMITS": "org-1=60/s,org-2=60/s"},
			paced: map[string]int{"t1": 50, "t2": 50, "t3": 50, "t4": 50}, groups: map[string]string{"t1": "org-1", "t2": "org-1", "t3": "org-1", "t4": "org-2"}},
	} {
		b.Run(v.name, func(b *testing.B) {
			for range b.N {
				v.run(b)
			}
		})
	}
}

// levelRun is one variant of BenchmarkGlobalLimit.
type levelRun struct {
	name    string
	vars    map[string]string
	backlog map[string]int    // jobs published before the workers start
	paced   map[string]int    // jobs a second published for the window
	groups  map[string]string // a tenant's group, sent in the Org header
}

// levelWindow is how long a run publishes and is measured.
const levelWindow = 60 * time.Second

func (v levelRun) run(b *testing.B) {
	vars := map[string]string{"THROTTLER_DEFAULT_LIMIT": "100000/s"}
	for k, x := range v.vars {
		vars[k] = x
	}
	f := startHTTPFleet(b, downstreamOptions{Took: map[string]time.Duration{allTenants: 5 * time.Millisecond}}, vars)
	f.e.ensureStream(f.cfg)
	var all []string
	for tenant, n := range v.backlog {
		all = append(all, f.publish(tenant, n)...)
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
	waits := map[string][]time.Duration{}
	for _, c := range calls {
		if c.Attempt != 1 {
			continue
		}
		if at, ok := pub.at[c.Key]; ok {
			waits[c.Tenant] = append(waits[c.Tenant], c.Arrived.Sub(at))
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
	line := fmt.Sprintf("%s: %.1f/s in all;", v.name, float64(total)/secs)
	for _, t := range tenants {
		r := float64(per[t]) / secs
		b.ReportMetric(r, t+"/s")
		line += fmt.Sprintf(" %s %.1f/s", t, r)
		if ws := waits[t]; len(ws) > 0 && v.paced[t] > 0 && len(v.backlog) > 0 {
			slices.Sort(ws)
			p99 := ws[len(ws)*99/100]
			b.ReportMetric(float64(p99.Milliseconds()), t+"-wait-p99-ms")
			line += fmt.Sprintf(" (wait p50 %s, p99 %s)", ws[len(ws)/2].Round(time.Millisecond), p99.Round(time.Millisecond))
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
func publishWithGroups(b *testing.B, f *httpFleet, perSecond map[string]int, groups map[string]string, d time.Duration) groupPublisher {
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

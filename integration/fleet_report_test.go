package integration

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// fleetReport is what one run of BenchmarkFleet measured.
type fleetReport struct {
	start                         time.Time
	natsLeader, natsNewLeader     string
	natsRecovered, redisRecovered time.Duration // stop → cluster whole again
	redisTenants                  []string      // tenants on the killed master
	windows                       []fleetWindow

	published, unacked     int
	retries, pubDuplicates int64
	publishedFor, drained  time.Duration
	busy                   string // what the workers still had to do at the end; "" settled

	account  fleetAccount
	forwards map[string][]time.Time // tenant → stored forward times
	counters map[string]float64     // the workers' metrics, summed
	exited   []string
	warnings []string
}

// fleetRow is one tenant's figures.
type fleetRow struct {
	tenant   fleetTenant
	rate     float64 // outside the windows
	jobs     int
	span     time.Duration
	admitted []int // per window
	bound    []float64
	excess   []float64
}

// rows computes each tenant's figures: its rate from fleetRateFrom to its
// last forward (when its backlog ran out) outside the windows, and what it
// was admitted across each window.
func (r *fleetReport) rows() []fleetRow {
	var out []fleetRow
	for _, t := range fleetTenants {
		ts := r.forwards[t.name]
		row := fleetRow{tenant: t}
		if len(ts) > 0 {
			row.rate, row.jobs, row.span = cleanRate(ts, r.start.Add(fleetRateFrom), ts[len(ts)-1], r.windows)
		}
		for _, w := range r.windows {
			a, b, e := windowExcess(ts, w, t.limit)
			row.admitted, row.bound, row.excess = append(row.admitted, a), append(row.bound, b), append(row.excess, e)
		}
		out = append(out, row)
	}
	return out
}

// String is the report b.Logf prints.
func (r *fleetReport) String() string {
	var b strings.Builder
	a := r.account
	fmt.Fprintf(&b, "published and acked %d (%d never acked, %d publishes sent again, %d of them already stored) over %s; all accounted for at %s, still busy: %q\n",
		r.published, r.unacked, r.retries, r.pubDuplicates, r.publishedFor.Round(time.Millisecond), r.drained.Round(time.Second), r.busy)
	fmt.Fprintf(&b, "ledger: %d forwarded + %d dead-lettered, %d lost; stored twice in JOBS_FORWARD %d; on done.>: %d seen, %d distinct, %d ran twice; %d forwarded never acked\n",
		a.forwarded, a.deadLettered, len(a.lost), a.storedTwice, a.seen, a.distinct, a.ranTwice, a.strangers)
	for _, row := range r.rows() {
		fmt.Fprintf(&b, "%-5s limit %g/s: %.2f/s outside the windows (%d jobs over %s, %+.2f%%)",
			row.tenant.name, row.tenant.limit, row.rate, row.jobs, row.span.Round(time.Millisecond), 100*(row.rate/row.tenant.limit-1))
		for i, w := range r.windows {
			fmt.Fprintf(&b, "; %s: %d admitted, bound %.0f, excess %+.0f", strings.Fields(w.name)[0], row.admitted[i], row.bound[i], row.excess[i])
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "nats: leader %s stopped at %s, cluster whole again after %s, leader now %s\n",
		r.natsLeader, r.at(r.windows[0].from), r.natsRecovered.Round(time.Millisecond), r.natsNewLeader)
	if len(r.windows) > 1 {
		fmt.Fprintf(&b, "redis: master of %v killed at %s, replica promoted after %s\n",
			r.redisTenants, r.at(r.windows[1].from), r.redisRecovered.Round(time.Millisecond))
	}
	for _, w := range r.windows {
		fmt.Fprintf(&b, "window %s: [%s, %s)\n", w.name, r.at(w.from), r.at(w.to))
	}
	for _, t := range fleetTenants {
		fmt.Fprintf(&b, "%-5s forwards per second:%s\n", t.name, r.perSecond(r.forwards[t.name]))
	}
	for _, name := range []string{"redis_errors", "deferred", "moved", "duplicates", "dead_lettered"} {
		var sum float64
		for k, v := range r.counters {
			if strings.HasPrefix(k, "throttler_"+name+"_total{") {
				sum += v
			}
		}
		fmt.Fprintf(&b, "workers' %s_total: %.0f\n", name, sum)
	}
	for _, l := range append(r.exited, r.warnings...) {
		fmt.Fprintln(&b, l)
	}
	return b.String()
}

// perSecond renders how many of sorted ts fall in each second from the
// first publish, ten to a group.
func (r *fleetReport) perSecond(ts []time.Time) string {
	if len(ts) == 0 {
		return ""
	}
	var b strings.Builder
	last := int(ts[len(ts)-1].Sub(r.start) / time.Second)
	for s := 0; s <= last; s++ {
		if s%10 == 0 {
			fmt.Fprintf(&b, " |%d:", s)
		}
		from := r.start.Add(time.Duration(s) * time.Second)
		fmt.Fprintf(&b, " %d", countIn(ts, from, from.Add(time.Second)))
	}
	return b.String()
}

// at is t as an offset from the first publish.
func (r *fleetReport) at(t time.Time) string {
	return fmt.Sprintf("%.1fs", t.Sub(r.start).Seconds())
}

// report reports the figures as benchmark metrics and fails the benchmark
// if a tenant's rate outside the windows is off its limit by more than 1%.
func (r *fleetReport) report(b *testing.B) {
	b.ReportMetric(float64(len(r.account.lost)), "lost")
	b.ReportMetric(float64(r.account.storedTwice), "stored-twice")
	b.ReportMetric(float64(r.account.ranTwice), "ran-twice")
	b.ReportMetric(r.natsRecovered.Seconds(), "nats-recovery-s")
	b.ReportMetric(r.redisRecovered.Seconds(), "redis-failover-s")
	for _, row := range r.rows() {
		b.ReportMetric(row.rate/row.tenant.limit, row.tenant.name+"-rate/limit")
		for i, w := range r.windows {
			b.ReportMetric(row.excess[i], row.tenant.name+"-"+strings.Fields(w.name)[0]+"-excess")
		}
		if math.Abs(row.rate/row.tenant.limit-1) > 0.01 {
			b.Errorf("%s: %.2f/s outside the failover windows, limit %g/s: off by more than 1%%", row.tenant.name, row.rate, row.tenant.limit)
		}
	}
}

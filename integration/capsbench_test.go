package integration

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/testenv"
)

// BenchmarkCaps measures what a running cap costs: three worker processes
// send acme's backlog (CAP_BACKLOG jobs, default 1,000, published before
// they start) to a downstream that takes 200 ms a request, and the run
// reports acme's deliveries per job and per cap-deferred job (a job's
// deliveries are 1, plus one per deferral by its rate, plus one per park:
// per cap-deferred job, 1 plus the deliveries its parks added), the Redis
// function calls (FCALL: decisions, leases given back and renewed, pokes)
// per job, and how much of the time the cap was full. Variants:
//
//   - cap: running:5, no rate;
//   - rate-and-cap: 20/s+running:5, the rate binding (5 at once of 200 ms
//     would be 25/s);
//   - rate-only: 25/s, no cap, the baseline of a throttled run at the
//     same pace.
//
// Run it with
//
//	go test -run '^$' -bench Caps -benchtime 1x -timeout 20m ./integration/
func BenchmarkCaps(b *testing.B) {
	backlog := 1000
	if s := getenv("CAP_BACKLOG"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 100 {
			b.Fatalf("CAP_BACKLOG=%q: want a whole number of at least 100", s)
		}
		backlog = n
	}
	for _, v := range []struct{ name, spec string }{
		{"cap", "running:5"},
		{"rate-and-cap", "20/s:1+running:5"},
		{"rate-only", "25/s:1"},
	} {
		b.Run(v.name, func(b *testing.B) {
			for range b.N {
				r := runCapBench(b, v.spec, backlog)
				b.Logf("%s: %d jobs in %s, at most %d in flight, %.1f%% of the time at 5; %.3f deliveries a job, %.0f parked (%.3f deliveries a parked job); %.3f FCALL a job",
					v.spec, backlog, r.span.Round(time.Millisecond), r.most, r.busy*100, r.deliveries, r.parked, r.perParked, r.fcalls)
				b.ReportMetric(r.deliveries, "deliveries/job")
				b.ReportMetric(r.perParked, "deliveries/parked-job")
				b.ReportMetric(r.fcalls, "fcall/job")
				b.ReportMetric(r.busy*100, "%at-5")
				b.ReportMetric(float64(r.most), "max-in-flight")
				b.ReportMetric(float64(backlog)/r.span.Seconds(), "jobs/s")
			}
		})
	}
}

// capBenchRun is what one run of BenchmarkCaps measured.
type capBenchRun struct {
	span       time.Duration // acme's first request to its last one's start
	most       int           // acme's requests in flight at once, at most
	busy       float64       // the share of span with 5 in flight
	deliveries float64       // acme's deliveries a job
	parked     float64       // acme's cap deferrals
	perParked  float64       // deliveries a parked job: 1 + (deliveries - jobs - rate deferrals) / parked
	fcalls     float64       // FCALLs a job
}

// runCapBench runs acme's backlog of jobs under spec through three
// worker processes.
func runCapBench(b *testing.B, spec string, jobs int) capBenchRun {
	f := startHTTPFleet(b, downstreamOptions{}, map[string]string{"THROTTLER_TENANT_LIMITS": "acme=" + spec,
		"THROTTLER_LOG_LEVEL": "warn"})
	f.e.ensureStream(f.cfg)
	ids := f.publish("acme", jobs)
	rdb := f.e.redis.Client(b)
	before, err := testenv.CommandStats(context.Background(), rdb)
	must(b, err, "commandstats")
	f.start(fleetSize)
	f.waitAnsweredOK(slices.Clone(ids), time.Duration(jobs)*defaultTook/5*3/2+60*time.Second)
	f.waitSettled(30 * time.Second)
	after, err := testenv.CommandStats(context.Background(), rdb)
	must(b, err, "commandstats")

	calls := f.ds.calls()
	first, last := spanOf(calls, "acme")
	delivered := f.tenantMetric("throttler_delivered_total", "acme")
	parked := f.tenantMetric("throttler_parks_total", "acme")
	r := capBenchRun{
		span: last.Sub(first), most: f.ds.maxInFlight("acme"), busy: f.ds.shareAtLeast("acme", 5, first, last),
		deliveries: delivered / float64(jobs), parked: parked,
		fcalls: float64(after["fcall"].Calls-before["fcall"].Calls) / float64(jobs),
	}
	if parked > 0 {
		rated := f.tenantMetric("throttler_deferred_total", "acme")
		r.perParked = 1 + (delivered-float64(jobs)-rated)/parked
	}
	if dups := f.ds.duplicates(); len(dups) != 0 {
		b.Errorf("keys sent more than once: %v", dups)
	}
	return r
}

package deploy

import (
	"context"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/ops"
	"github.com/throttler/throttler/internal/testenv"
)

// BenchmarkWaitingGauge measures how closely throttler_waiting_jobs, as a
// worker's /metrics serves it to a scrape, follows what the servers hold
// while it changes (issue 31): the live test's two workers, the slow
// tenant (1/m:1) published 5 jobs a second, whose moved jobs grow, and
// 600 jobs of the paced tenant (running:1, 50 ms requests) at once, whose
// parked jobs run one by one. Every 1.3 s for 40 s: the counts inspect
// reads (the slow tenant's moved jobs in the stream, the paced tenant's
// waiting list), a scrape of the first worker, and the counts again; the
// scheduled and parked gauges against the counts around the scrape. It
// reports the samples within 1% and the worst difference
// (-v: every sample):
//
//	cd deploy && go test -run '^$' -bench WaitingGauge -benchtime 1x .
func BenchmarkWaitingGauge(b *testing.B) {
	for range b.N {
		measureWaitingGauge(b)
	}
}

// gaugeSample is one sample: the gauges served and the servers' counts
// read just before and just after the scrape.
type gaugeSample struct {
	scheduled, parked [3]float64 // served; servers' before, after
}

// off is the larger of the sample's two differences: how far the served
// count lies outside the servers' counts around the scrape, relative to
// the nearer one (or to one job, when smaller). Counts that change while
// the scrape reads them are matched by any count between.
func (s gaugeSample) off() float64 {
	rel := func(v [3]float64) float64 {
		lo, hi := min(v[1], v[2]), max(v[1], v[2])
		switch {
		case v[0] < lo:
			return (lo - v[0]) / max(lo, 1)
		case v[0] > hi:
			return (v[0] - hi) / max(hi, 1)
		}
		return 0
	}
	return max(rel(s.scheduled), rel(s.parked))
}

func measureWaitingGauge(b *testing.B) {
	f := startLiveFleet(b, 0)
	testenv.Eventually(b, 30*time.Second, "both workers ready", func() bool {
		return f.scalar(b, `sum(throttler_ready{job="throttler"})`) == 2
	})
	f.publish(b, tenantPaced, 600, nil)
	defer f.publishEvery(b, tenantSlow, 200*time.Millisecond)()
	var samples []gaugeSample
	end := time.Now().Add(40 * time.Second)
	for time.Now().Before(end) {
		time.Sleep(1300 * time.Millisecond)
		moved0, parked0 := f.serversWaiting(b)
		served := scrapeWaiting(b, f.workers[0])
		moved1, parked1 := f.serversWaiting(b)
		if served == nil {
			continue // no count yet
		}
		samples = append(samples, gaugeSample{scheduled: [3]float64{served["scheduled"], moved0, moved1},
			parked: [3]float64{served["parked"], parked0, parked1}})
	}
	if len(samples) == 0 {
		b.Fatal("no sample with the gauge served")
	}
	if testing.Verbose() {
		for i, s := range samples {
			b.Logf("sample %d: scheduled %v, parked %v (served; servers' before, after)", i, s.scheduled, s.parked)
		}
	}
	within, offs := 0, make([]float64, len(samples))
	for i, s := range samples {
		offs[i] = s.off()
		if offs[i] <= 0.01 {
			within++
		}
	}
	worst := slices.Index(offs, slices.Max(offs))
	b.ReportMetric(float64(within)/float64(len(samples))*100, "%-within-1%")
	b.ReportMetric(offs[worst]*100, "worst-%")
	b.Logf("%d of %d samples within 1%% of the servers; worst %.1f%% (scheduled %v, parked %v: served; servers' before, after)",
		within, len(samples), offs[worst]*100, samples[worst].scheduled, samples[worst].parked)
}

// serversWaiting reads what inspect reads: the slow tenant's moved jobs in
// the stream and the paced tenant's waiting list.
func (f *liveFleet) serversWaiting(b *testing.B) (moved, parked float64) {
	b.Helper()
	ctx := context.Background()
	n, err := ops.WaitingFor(ctx, f.js, f.cfg.Stream, f.cfg.Schedules, tenantSlow)
	if err != nil {
		b.Fatal(err)
	}
	snap, err := f.limiter.Peek(ctx, tenantPaced, time.Time{})
	if err != nil || snap.Cap == nil {
		b.Fatalf("peek %s: %+v, %v", tenantPaced, snap, err)
	}
	return float64(n), float64(snap.Cap.Waiting)
}

// scrapeWaiting reads throttler_waiting_jobs by kind from a worker's
// /metrics, or nil when it serves none.
func scrapeWaiting(b *testing.B, addr string) map[string]float64 {
	b.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		b.Fatal(err)
	}
	fam := parseMetrics(b, body)["throttler_waiting_jobs"]
	if fam == nil {
		return nil
	}
	out := map[string]float64{}
	for _, m := range fam.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "kind" {
				out[l.GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

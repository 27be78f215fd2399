package integration

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/throttler/throttler/consumer"
)

// admission is one job seen by the handler.
type admission struct {
	id        string
	at        time.Time
	delivered uint64
}

// recorder wraps a handler and records every admission per tenant.
type recorder struct {
	mu   sync.Mutex
	byT  map[string][]admission
	next consumer.Handler
}

func newRecorder(next consumer.Handler) *recorder {
	return &recorder{byT: map[string][]admission{}, next: next}
}

func (r *recorder) handle(ctx context.Context, job consumer.Job) error {
	if r.next != nil {
		if err := r.next(ctx, job); err != nil {
			return err
		}
	}
	r.mu.Lock()
	r.byT[job.Tenant] = append(r.byT[job.Tenant], admission{id: job.ID, at: time.Now(), delivered: job.Delivered})
	r.mu.Unlock()
	return nil
}

func (r *recorder) tenant(t string) []admission {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]admission(nil), r.byT[t]...)
}

// TestThreeTenantsHeldToTheirLimits is the acceptance run of the worker:
// three tenants published at 3× their limits for 10 s against two workers.
// Each tenant's admitted rate is within ±3% of its limit, no job is lost or
// forwarded twice, and a throttled job is delivered ≤ 2.1 times on average.
func TestThreeTenantsHeldToTheirLimits(t *testing.T) {
	e := setup(t)
	type tenant struct {
		name  string
		rate  int
		burst int
	}
	tenants := []tenant{{"small", 20, 5}, {"medium", 50, 5}, {"large", 200, 10}}
	limits := ""
	for i, tn := range tenants {
		if i > 0 {
			limits += ","
		}
		limits += fmt.Sprintf("%s=%d/s:%d", tn.name, tn.rate, tn.burst)
	}
	// Every deferred job stays ack-pending while it waits (NAK deferral):
	// at most 2/3 of the 8,100 jobs are waiting at once, so 10,000 fits.
	cfg := e.config(map[string]string{
		"THROTTLER_TENANT_LIMITS":   limits,
		"THROTTLER_MAX_ACK_PENDING": "10000",
		"THROTTLER_CONCURRENCY":     "64",
		"THROTTLER_DEFER":           "nak",
	})
	e.ensureStream(cfg)
	rec := newRecorder(nil)
	fwd := consumer.Forwarder(e.js, cfg.Forward)
	w1 := e.startWorker(cfg, chain(fwd, rec.handle))
	w2 := e.startWorker(cfg, chain(fwd, rec.handle))
	out := e.collect("done.*")

	// Publish each tenant at 3× its limit for 10 s, in 100 ms ticks.
	published := map[string]map[string]bool{}
	for _, tn := range tenants {
		published[tn.name] = map[string]bool{}
	}
	const ticks = 100
	start := time.Now()
	for tick := 0; tick < ticks; tick++ {
		for _, tn := range tenants {
			for i := 0; i < tn.rate*3/10; i++ {
				seq := e.publish("jobs."+tn.name, nil, []byte("job"))
				published[tn.name][jobID("JOBS", seq)] = true
			}
		}
		time.Sleep(time.Until(start.Add(time.Duration(tick+1) * 100 * time.Millisecond))) // publishing pace
	}
	total := 0
	for _, p := range published {
		total += len(p)
	}
	got := out.waitCount(t, total, 60*time.Second)
	// The recorder runs after the forward: every job is recorded once the
	// jobs have settled (each acked after its handler returned).
	e.waitSettled(t, cfg, 10*time.Second)

	seen := map[string]bool{}
	for _, m := range got {
		if seen[m.jobID] {
			t.Errorf("job %s forwarded twice", m.jobID)
		}
		seen[m.jobID] = true
		if !published[m.tenant][m.jobID] {
			t.Errorf("forwarded job %s of %q was never published", m.jobID, m.tenant)
		}
	}
	for _, tn := range tenants {
		adm := rec.tenant(tn.name)
		if len(adm) != len(published[tn.name]) {
			t.Errorf("%s: %d admitted, %d published", tn.name, len(adm), len(published[tn.name]))
			continue
		}
		sort.Slice(adm, func(i, j int) bool { return adm[i].at.Before(adm[j].at) })
		span := adm[len(adm)-1].at.Sub(adm[0].at).Seconds()
		rate := float64(len(adm)-tn.burst) / span
		var deliveries, throttled float64
		for _, a := range adm {
			if a.delivered > 1 {
				deliveries += float64(a.delivered)
				throttled++
			}
		}
		avg := deliveries / throttled
		t.Logf("%s: limit %d/s, admitted %.2f/s (%+.2f%%), %d jobs over %.1fs, %.0f throttled, %.3f deliveries per throttled job",
			tn.name, tn.rate, rate, 100*(rate/float64(tn.rate)-1), len(adm), span, throttled, avg)
		if rate < float64(tn.rate)*0.97 || rate > float64(tn.rate)*1.03 {
			t.Errorf("%s: admitted %.2f/s, want %d/s ±3%%", tn.name, rate, tn.rate)
		}
		if avg > 2.1 {
			t.Errorf("%s: %.3f deliveries per throttled job, want ≤ 2.1", tn.name, avg)
		}
	}
	for _, w := range []*worker{w1, w2} {
		for tn, s := range w.stats() {
			if s.DeadLettered != 0 {
				t.Errorf("%s: %d jobs dead-lettered", tn, s.DeadLettered)
			}
		}
	}
}

// chain runs the handlers in order, stopping at the first error.
func chain(hs ...consumer.Handler) consumer.Handler {
	return func(ctx context.Context, job consumer.Job) error {
		for _, h := range hs {
			if err := h(ctx, job); err != nil {
				return err
			}
		}
		return nil
	}
}

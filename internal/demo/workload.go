package demo

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/throttle"
)

// publishTimeout bounds one publish. A publish in flight is never abandoned
// when the demo stops, so the published count is exact.
const publishTimeout = 5 * time.Second

// tenant is one tenant of the built-in workload: every period it publishes
// batch jobs to jobs.<name>, starting at once.
type tenant struct {
	name   string
	every  time.Duration
	batch  int
	limits throttle.Limits // filled from the configuration
}

// workload returns the demo's three tenants, without their limits.
func workload() []tenant {
	return []tenant{
		{name: "flood", every: 10 * time.Millisecond, batch: 1},  // 100/s, 5× its limit
		{name: "steady", every: 40 * time.Millisecond, batch: 1}, // 25/s, half its limit
		{name: "bursty", every: 2 * time.Second, batch: 60},      // 30/s on average, bursts of 2× its burst
	}
}

// subject is where t's jobs are published.
func (t tenant) subject() string { return "jobs." + t.name }

// offered is the rate t publishes at, in jobs per second.
func (t tenant) offered() float64 { return float64(t.batch) / t.every.Seconds() }

// rate is t's sustained limit in jobs per second: the slowest of its limits.
func (t tenant) rate() float64 {
	r := math.Inf(1)
	for _, l := range t.limits {
		r = min(r, float64(l.Rate)/l.Period.Seconds())
	}
	return r
}

// burst is the most jobs t may have admitted at once.
func (t tenant) burst() int64 { return t.limits.MinBurst() }

// limitLabel describes t's limits, such as "20/s burst 5".
func (t tenant) limitLabel() string {
	parts := make([]string, len(t.limits))
	for i, l := range t.limits {
		per := strings.SplitN(l.String(), ":", 2)[0] // "20/s:5" → "20/s"
		parts[i] = per + " burst " + strconv.FormatInt(l.Burst, 10)
	}
	return strings.Join(parts, " + ")
}

// due is how many jobs t has published after elapsed, publishing only
// during the first d.
func (t tenant) due(elapsed, d time.Duration) int64 {
	ticks := int64(elapsed/t.every) + 1
	total := int64((d + t.every - 1) / t.every)
	return min(ticks, total) * int64(t.batch)
}

// publisher publishes the jobs of one tenant.
type publisher struct {
	js       jetstream.JetStream
	t        tenant
	rec      *recorder
	log      *slog.Logger
	start    time.Time
	duration time.Duration
}

// publishAll runs one publisher per tenant until each has published its
// jobs for d or ctx is cancelled. It returns a function that waits for them.
func publishAll(ctx context.Context, js jetstream.JetStream, tenants []tenant, rec *recorder, log *slog.Logger, d time.Duration) (wait func()) {
	var wg sync.WaitGroup
	start := time.Now()
	for _, t := range tenants {
		p := &publisher{js: js, t: t, rec: rec, log: log, start: start, duration: d}
		wg.Go(func() { p.run(ctx) })
	}
	return wg.Wait
}

// run publishes on a ticker, catching up when a tick is late so the rate
// stays exact, until every job is published or ctx is cancelled.
func (p *publisher) run(ctx context.Context) {
	tick := time.NewTicker(p.t.every)
	defer tick.Stop()
	total := p.t.due(p.duration, p.duration)
	var sent int64
	for {
		for due := p.t.due(time.Since(p.start), p.duration); sent < due; sent++ {
			if ctx.Err() != nil {
				return
			}
			p.publish(ctx, sent)
		}
		if sent >= total {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// publish publishes job number n and records it once JetStream stored it.
func (p *publisher) publish(ctx context.Context, n int64) {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	at := time.Now()
	data := fmt.Appendf(nil, "%s-%d", p.t.name, n)
	if _, err := p.js.Publish(pctx, p.t.subject(), data); err != nil {
		p.rec.publishFailed(p.t.name)
		p.log.Warn("publish failed", "tenant", p.t.name, "err", err)
		return
	}
	p.rec.published(p.t.name, at)
}

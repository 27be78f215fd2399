package demo

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/throttler/throttler/internal/ops"
	"github.com/throttler/throttler/subject"
)

const (
	// rateWindow is the window of the table's admission rate.
	rateWindow = 5 * time.Second
	// overTolerance is how far above its limit a limited tenant's sustained
	// rate may be and still count as held to it.
	overTolerance = 1.05
	// underTolerance is how far below its limit a tenant that always had
	// jobs waiting may be and still count as held to it.
	underTolerance = 0.9
	// promptWait is the longest p99 wait of a tenant admitted promptly.
	promptWait = time.Second
	// pendingTimeout bounds the wait for the consumer's counts to settle
	// after shutdown.
	pendingTimeout = 3 * time.Second
)

// row is one tenant's line of the table: its record and its deferrals.
type row struct {
	t        tenant
	v        view
	deferred int64
}

// rows snapshots every tenant at now.
func rows(tenants []tenant, rec *recorder, f *fleet, now time.Time) []row {
	deferred := f.deferred()
	out := make([]row, len(tenants))
	for i, t := range tenants {
		out[i] = row{t: t, v: rec.view(t.name, now, rateWindow), deferred: deferred[t.name]}
	}
	return out
}

// legend explains each column of the table, printed once before the
// first table (and in the README).
const legend = `Columns:
  tenant         flood publishes far over its limit, steady under it, bursty in bursts past its burst
  limit          the tenant's limit, RATE/UNIT:BURST
  published      jobs the workload stored in the jobs stream
  admitted       jobs the worker ran (the demo's handler counts them)
  rate/s         jobs admitted per second, over the last 5 s
  deferred       times the worker put a job off because its tenant was over its limit
  redeliveries   extra deliveries of the same message before it ran, summed over the
                 jobs admitted: a job put off with a NAK comes back as a redelivery, but
                 one moved off the consumer to wait for its slot (a wait of 5 s or more,
                 or its tenant already holding its share of NAK'd jobs) comes back as a
                 new message. So once a flood's waits pass 5 s, deferred climbs while
                 redeliveries stays put. Neither counts failures; nothing is lost.
  p50/p99 wait   publish to handler start of the jobs admitted, 50th and 99th percentile
`

// printTable writes the table of rs under title, columns aligned.
func printTable(w io.Writer, title string, rs []row, elapsed time.Duration) {
	fmt.Fprintln(w, title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "tenant\tlimit\tpublished\tadmitted\trate/s (last 5s)\tdeferred\tredeliveries\tp50 wait (ms)\tp99 wait (ms)")
	window := min(elapsed, rateWindow).Seconds()
	for _, r := range rs {
		rate := 0.0
		if window > 0 {
			rate = float64(r.v.recent) / window
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.1f\t%d\t%d\t%d\t%d\n",
			r.t.name, r.t.limitLabel(), r.v.published, r.v.admitted, rate,
			r.deferred, r.v.redeliveries, r.v.p50.Milliseconds(), r.v.p99.Milliseconds())
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
}

// judgement is the verdict on one tenant.
type judgement struct {
	detail  string // the numbers behind the outcome
	outcome string // "held to limit", "OVER LIMIT", ...
}

// judge decides whether r's tenant was held to its limit (when it asked for
// more than the limit allows) or admitted promptly (when it did not).
func judge(r row) judgement {
	t, v := r.t, r.v
	span := v.lastPublish.Sub(v.firstPublish).Seconds()
	capacity := float64(t.burst()) + t.rate()*span
	if float64(v.published) <= capacity {
		return judgePrompt(r)
	}
	active := v.lastAdmit.Sub(v.firstPublish).Seconds()
	if v.admitted == 0 || active <= 0 {
		return judgement{detail: "nothing admitted", outcome: "NOTHING ADMITTED"}
	}
	sustained := float64(v.admitted-t.burst()) / active
	detail := fmt.Sprintf("sustained %.1f/s = (%d admitted - %d burst) / %.2fs", sustained, v.admitted, t.burst(), active)
	waiting := v.published - v.admitted
	backlog := float64(waiting) >= t.rate() // at least a second's worth still waiting
	switch {
	case sustained > t.rate()*overTolerance:
		return judgement{detail: detail, outcome: "OVER LIMIT"}
	case backlog && sustained < t.rate()*underTolerance:
		return judgement{detail: detail, outcome: "BELOW LIMIT despite a backlog"}
	}
	return judgement{detail: detail, outcome: "held to limit"}
}

// judgePrompt judges a tenant that stayed within its limit: its jobs should
// have been admitted with little wait, and few should still be waiting.
func judgePrompt(r row) judgement {
	waiting := r.v.published - r.v.admitted
	detail := fmt.Sprintf("%d still waiting, p99 wait %dms", waiting, r.v.p99.Milliseconds())
	if float64(waiting) <= max(1, r.t.offered()) && r.v.p99 <= promptWait {
		return judgement{detail: detail, outcome: "all admitted promptly"}
	}
	return judgement{detail: detail, outcome: "DELAYED"}
}

// printVerdict writes one verdict line per tenant.
func printVerdict(w io.Writer, rs []row) {
	fmt.Fprintln(w, "Verdict (sustained rate = (admitted - burst) / (last admission - first publish)):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range rs {
		j := judge(r)
		fmt.Fprintf(tw, "verdict\t%s\t%s\toffered %.1f/s\tadmitted %d of %d\t%s\t-> %s\n",
			r.t.name, r.t.limitLabel(), r.t.offered(), r.v.admitted, r.v.published, j.detail, j.outcome)
	}
	_ = tw.Flush()
}

// pendingCounts is the consumer's view of the jobs not yet acked.
type pendingCounts struct {
	ackPending   int // delivered (or deferred) and not acked
	notDelivered int // never delivered yet
	scheduled    int // moved off the consumer, waiting for their slot
}

func (p pendingCounts) total() int { return p.ackPending + p.notDelivered + p.scheduled }

// readPending reads the consumer's counts, polling until they account for
// want jobs or pendingTimeout passes: acks sent just before shutdown may
// still be in the server's queue.
func readPending(ctx context.Context, js jetstream.JetStream, stream, name string, scheduled subject.Schedules, want int) (pendingCounts, error) {
	cons, err := js.Consumer(ctx, stream, name)
	if err != nil {
		return pendingCounts{}, fmt.Errorf("consumer %s on stream %s: %w", name, stream, err)
	}
	deadline := time.Now().Add(pendingTimeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			return pendingCounts{}, fmt.Errorf("consumer %s info: %w", name, err)
		}
		p := pendingCounts{ackPending: info.NumAckPending, notDelivered: int(info.NumPending)}
		if p.scheduled, err = ops.WaitingInSchedules(ctx, js, stream, scheduled); err != nil {
			return pendingCounts{}, err
		}
		if p.total() == want || time.Now().After(deadline) {
			return p, nil // a mismatch is reported, not failed
		}
		select {
		case <-ctx.Done():
			return pendingCounts{}, ctx.Err()
		case <-tick.C:
		}
	}
}

// printAccounting checks that every published job was admitted or is still
// held by the consumer, and says so.
func printAccounting(w io.Writer, rs []row, p pendingCounts) {
	var published, admitted, duplicates, failed int64
	for _, r := range rs {
		published += r.v.published
		admitted += r.v.admitted
		duplicates += r.v.duplicates
		failed += r.v.publishErrors
	}
	balanced := published == admitted+int64(p.total())
	relation, lead := "!=", "MISMATCH between published and admitted + pending"
	if balanced {
		relation, lead = "=", "every published job was admitted or is still deferred (nothing lost)"
	}
	fmt.Fprintf(w, "%s: published %d %s admitted %d + still pending %d (%d NAK-deferred or handed back, %d moved off the consumer until their slot, %d not yet delivered)\n",
		lead, published, relation, admitted, p.total(), p.ackPending, p.scheduled, p.notDelivered)
	if duplicates > 0 {
		fmt.Fprintf(w, "%d jobs were run more than once (an ack was lost and JetStream redelivered them)\n", duplicates)
	}
	if failed > 0 {
		fmt.Fprintf(w, "%d publishes failed and are not counted as published\n", failed)
	}
}

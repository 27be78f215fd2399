package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/throttle"
)

// The kinds of waiting jobs throttler_waiting_jobs counts.
const (
	// waitingNak: NAK'd jobs, delivered and due back on the consumer
	// (the consumer's ack-pending less the jobs in the workers' hands).
	waitingNak = "nak"
	// waitingScheduled: jobs moved off the consumer into schedules,
	// parked ones aside.
	waitingScheduled = "scheduled"
	// waitingParked: jobs waiting for a lease of a running cap.
	waitingParked = "parked"
	// waitingQueued: jobs waiting for their turn under a limit above the
	// tenant (a group's or the global one).
	waitingQueued = "queued"
	// waitingPaused: moved jobs of tenants an operator paused.
	waitingPaused = "paused"
	// waitingHeld: moved jobs of tenants whose downstream asked to wait.
	waitingHeld = "held"
)

// maxTenantsCounted bounds the paused and the held tenants whose moved
// jobs one count reads (a stream info each): past it the rest count as
// scheduled.
const maxTenantsCounted = 64

// censusEvery is how often each worker reports its jobs in hand and reads
// the fleet's counts, and how often the counter counts, so that the counts
// a scrape reads are about a second old: a worker's part costs a Redis
// round trip or two; a count a few Redis calls and one stream info listing
// the schedules' subjects, one per moved job, which the counter paces
// (censusSlowest).
const censusEvery = time.Second

// censusSlowest bounds how far apart the counter's counts get: it counts
// no more than a twentieth of the time (a count that took 100 ms waits 2 s
// for the next), and at least this often. Counts older than three times
// this are stale: no worker serves them.
const censusSlowest = 10 * time.Second

// waitingCounter is the worker's part in the fleet's count of waiting
// jobs (throttle.Census): every censusEvery it reports the jobs in its
// hands and the caps it parked jobs under; if it holds the counter's
// lease it counts the waiting jobs by kind and writes them to Redis; and
// it reads the counts the counter wrote, which its /metrics serves as
// throttler_waiting_jobs. Every worker thus serves the same fleet-wide
// counts (dashboards take their max), and the fleet counts once per
// interval however many workers it has.
type waitingCounter struct {
	census *throttle.Census
	id     string // this worker in the census
	every  time.Duration
	now    func() time.Time
	log    *slog.Logger

	// inHand and parkedUnder read the worker (consumer.Worker's InHand
	// and ParkedUnder).
	inHand      func() int
	parkedUnder func(from time.Time) []string
	// queuedUnder reads the levels the worker queued jobs under
	// (consumer.Worker's QueuedUnder); nil for none.
	queuedUnder func(from time.Time) []string
	// ackPending is the jobs consumer's ack-pending count as last read,
	// -1 before the first read.
	ackPending func() int
	// copies counts the moved jobs waiting in schedules (ops'
	// WaitingInSchedules), copiesOf one tenant's (ops' WaitingFor); nil
	// when jobs are never moved (THROTTLER_DEFER=nak).
	copies   func(ctx context.Context) (int, error)
	copiesOf func(ctx context.Context, tenant string) (int, error)
	// paused and held name the tenants paused, and held by their
	// downstream, at now; nil for none.
	paused, held func(now time.Time) []string

	// counted is when the counter last counted, and took how long
	// (censusSlowest).
	counted time.Time
	took    time.Duration
	// scrape counts for the scrapes (served).
	scrape scrapeCount

	mu     sync.Mutex
	counts map[string]int64
	at     time.Time
}

// newWorkerID returns an id for this worker in the census, unique in the
// fleet: 64 random bits.
func newWorkerID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("a worker id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// newWaitingCounter returns the worker's waitingCounter, or nil without a
// metrics server (nothing would serve the counts).
func newWaitingCounter(srv *server, limiter *throttle.Limiter, w *consumer.Worker, ackPending *consumer.AckPending,
	copies func(context.Context) (int, error), copiesOf func(context.Context, string) (int, error),
	paused func(time.Time) []string, every time.Duration, log *slog.Logger) (*waitingCounter, error) {
	if srv == nil {
		return nil, nil
	}
	id, err := newWorkerID()
	if err != nil {
		return nil, err
	}
	return &waitingCounter{census: limiter.Census(), id: id, every: every, now: time.Now, log: log,
		inHand: w.InHand, parkedUnder: w.ParkedUnder, queuedUnder: w.QueuedUnder, ackPending: ackPending.Count, copies: copies,
		copiesOf: copiesOf, paused: paused, held: w.HeldDownstream}, nil
}

// run takes part in the census every interval until ctx is done.
func (c *waitingCounter) run(ctx context.Context) {
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		c.tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tick is one round: report, count if the counter, read the counts. A
// failure is logged at debug level and leaves the last counts, which go
// stale (and out of /metrics) if failures last.
func (c *waitingCounter) tick(parent context.Context) {
	ctx, cancel := context.WithTimeout(parent, c.every)
	defer cancel()
	now := c.now()
	if err := c.census.ReportInHand(ctx, c.id, c.inHand(), now); err != nil {
		c.log.Debug("reporting the jobs in hand failed", "err", err)
	}
	c.note(ctx, now)
	counter, err := c.census.TakeCounter(ctx, c.id, 3*c.every)
	if err != nil {
		c.log.Debug("taking the census counter failed", "err", err)
	}
	if counter && c.due(now) {
		// A count may take longer than a tick (a stream info listing many
		// moved jobs): it has the longest interval between counts.
		cctx, ccancel := context.WithTimeout(parent, censusSlowest)
		err := c.count(cctx, now)
		ccancel()
		c.counted, c.took = now, c.now().Sub(now)
		if err != nil && parent.Err() == nil { // not the worker stopping
			c.log.Warn("counting the waiting jobs failed; throttler_waiting_jobs keeps the last counts", "err", err)
		}
	}
	counts, at, err := c.census.Counts(ctx)
	if err != nil {
		c.log.Debug("reading the counts of waiting jobs failed", "err", err)
		return
	}
	c.mu.Lock()
	c.counts, c.at = counts, at
	c.mu.Unlock()
}

// note notes the caps and the levels this worker parked or queued jobs
// under lately, for the counts to read their waiting lists.
func (c *waitingCounter) note(ctx context.Context, now time.Time) {
	if err := c.census.NoteParked(ctx, c.parkedUnder(now.Add(-2*c.every))); err != nil {
		c.log.Debug("noting the caps jobs were parked under failed", "err", err)
	}
	if c.queuedUnder != nil {
		if err := c.census.NoteQueued(ctx, c.queuedUnder(now.Add(-2*c.every))); err != nil {
			c.log.Debug("noting the levels jobs were queued under failed", "err", err)
		}
	}
}

// count counts the fleet's waiting jobs by kind and publishes them. Jobs
// parked under a cap are moved into schedules when jobs are moved at
// all, and NAK'd otherwise: they are taken out of the kind that holds
// them, so that no job is counted twice. So are the moved jobs of paused
// tenants and of tenants held by their downstream: a tenant's count is
// one stream info, read for at most maxTenantsCounted of each.
func (c *waitingCounter) count(ctx context.Context, now time.Time) error {
	counts, err := c.tally(ctx, now)
	if err != nil || counts == nil {
		return err
	}
	return c.census.Publish(ctx, counts, now)
}

// tally counts the fleet's waiting jobs by kind (count), or returns nil
// before the consumer's ack-pending was first read.
func (c *waitingCounter) tally(ctx context.Context, now time.Time) (map[string]int64, error) {
	ack := c.ackPending()
	if ack < 0 {
		return nil, nil // the consumer not read yet: nothing to count NAK'd jobs with
	}
	parked, err := c.census.Parked(ctx)
	if err != nil {
		return nil, err
	}
	queued, err := c.census.Queued(ctx)
	if err != nil {
		return nil, err
	}
	inHand, err := c.census.InHand(ctx, now.Add(-3*c.every))
	if err != nil {
		return nil, err
	}
	nak := int64(ack) - inHand
	var scheduled int64
	if c.copies != nil {
		n, err := c.copies(ctx)
		if err != nil {
			return nil, err
		}
		scheduled = int64(n) - parked - queued
	} else {
		nak -= parked + queued
	}
	// Every kind, 0 included: a kind with nothing waiting is a series at 0,
	// not a series gone or stuck at its last value.
	counts := map[string]int64{waitingParked: parked, waitingQueued: queued, waitingPaused: 0, waitingHeld: 0}
	if c.copiesOf != nil {
		paused := c.tenants(c.paused, now, nil)
		for kind, tenants := range map[string][]string{waitingPaused: paused, waitingHeld: c.tenants(c.held, now, paused)} {
			for _, t := range tenants {
				n, err := c.copiesOf(ctx, t)
				if err != nil {
					return nil, err
				}
				counts[kind] += int64(n)
				scheduled -= int64(n)
			}
		}
	}
	counts[waitingNak], counts[waitingScheduled] = max(0, nak), max(0, scheduled)
	return counts, nil
}

// due reports whether the counter counts at now (paced).
func (c *waitingCounter) due(now time.Time) bool { return paced(c.counted, c.took, c.every, now) }

// paced reports whether a count is due at now, the last one made at
// counted and taking took: every interval, unless the last count took
// more than a twentieth of one; then once twenty times its duration
// passed, and at least every censusSlowest.
func paced(counted time.Time, took, every time.Duration, now time.Time) bool {
	if counted.IsZero() || 20*took <= every {
		return true
	}
	return now.Sub(counted) >= min(20*took, censusSlowest)
}

// tenants returns at most maxTenantsCounted of the tenants of, at now,
// leaving out those in but.
func (c *waitingCounter) tenants(of func(time.Time) []string, now time.Time, but []string) []string {
	if of == nil {
		return nil
	}
	var out []string
	for _, t := range of(now) {
		if !slices.Contains(but, t) && len(out) < maxTenantsCounted {
			out = append(out, t)
		}
	}
	return out
}

// waiting returns the counts last read, unless they are missing or older
// than three of the longest intervals between counts (the counter gone or
// failing): a stale count would read as jobs that may have run long since.
func (c *waitingCounter) waiting() (map[string]int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil || c.at.Before(c.now().Add(-3*max(c.every, censusSlowest))) {
		return nil, false
	}
	return c.counts, true
}

// orDefault returns d unless it is 0, else def.
func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

package consumer

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// crowdedAt is the most messages a consumer should have pending for NAK
// delays to keep their precision. nats-server redelivers a message NAK'd
// with a delay in its consumer's pending pass, which it skips, and retries
// 100 ms later, whenever an ack is being processed while more than 1,024
// messages are pending (consumer.go checkPending in 2.15.2): under a steady
// flow of acks such delays come back late, hundreds of milliseconds and
// more, and together (BENCHMARKS.md, "NAK delays"). crowdedAt leaves room
// below that for the jobs being pulled while a count is read.
const crowdedAt = 900

// NakedPerWorker is how many NAK'd jobs one worker should keep waiting at
// most (FairDeferrer.MaxNaked), and how many it keeps for their slot
// itself (Config.ShortWait), each holding an ack-pending slot the same way:
// a quarter of the 900 messages a consumer may have pending before NAK
// delays lose their precision, so that two workers stay below that with
// their pulls and handlers.
const NakedPerWorker = crowdedAt / 4

// AckPending follows how many messages a consumer has delivered and not
// had acked (its NumAckPending), reading its info every so often. The
// worker runs it; a FairDeferrer reads it to move jobs rather than NAK
// them once the consumer is crowded. The same read gives the consumer's
// backlog (NumPending) and its MaxAckPending, kept for the worker's
// metrics at no extra request. Safe for concurrent use.
type AckPending struct {
	cons    jetstream.Consumer
	every   time.Duration
	n       atomic.Int64 // -1 until read
	pending atomic.Int64 // NumPending; -1 until read
	max     atomic.Int64 // Config.MaxAckPending; -1 until read
}

// NewAckPending returns an AckPending of cons, read every interval once
// Run runs.
func NewAckPending(cons jetstream.Consumer, every time.Duration) *AckPending {
	a := &AckPending{cons: cons, every: every}
	a.n.Store(-1)
	a.pending.Store(-1)
	a.max.Store(-1)
	return a
}

// Count is the consumer's ack-pending count as last read, or -1 before
// the first read.
func (a *AckPending) Count() int { return int(a.n.Load()) }

// Pending is the consumer's messages not yet delivered (its NumPending)
// as last read, or -1 before the first read.
func (a *AckPending) Pending() int { return int(a.pending.Load()) }

// MaxAckPending is the consumer's MaxAckPending as last read from the
// server (which may differ from the setting while another version's
// worker set it up), or -1 before the first read.
func (a *AckPending) MaxAckPending() int { return int(a.max.Load()) }

// Run reads the count every interval until ctx is cancelled; a failed
// read keeps the last count.
func (a *AckPending) Run(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(a.every)
	defer t.Stop()
	for {
		ictx, cancel := context.WithTimeout(ctx, a.every)
		info, err := a.cons.Info(ictx)
		cancel()
		switch {
		case err == nil:
			a.n.Store(int64(info.NumAckPending))
			a.pending.Store(int64(info.NumPending))
			a.max.Store(int64(info.Config.MaxAckPending))
		case ctx.Err() == nil:
			log.Debug("reading the consumer's ack-pending count failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// startAckPending runs the worker's AckPending until ctx is cancelled;
// Run's shutdown waits for it with the handlers. A worker has it when
// its Params give one.
func (l *laneAdapter) startAckPending(ctx, _ context.Context) (stop func()) {
	l.handlers.Add(1)
	go func() {
		defer l.handlers.Done()
		l.ackPending.Run(ctx, l.log)
	}()
	return func() {}
}

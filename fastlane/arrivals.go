package fastlane

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/consumer"
)

// The lane sees jobs arrive through a consumer of its own on the jobs
// stream, Config.Arrivals: a pull consumer of the job subjects that
// delivers headers only and wants no acks, shared by the fleet's lanes
// (each arrival reaches one of them). It delivers what is stored after it
// is created, when a backlog starts; it is read while the backlog lasts, and left when the
// jobs consumer has had no backlog for IdleOff; the server deletes it once
// it has had no reader for ArrivalsIdle. The stream's configuration is
// never touched. Jobs stored before it exists wait for the backlog, as
// they would without a lane.

// retryReading is how long the lane waits before trying again to read
// arrivals after a failed start.
const retryReading = 10 * time.Second

// startReading reads arrivals, unless the lane already does, a start
// failed less than retryReading ago, or another consumer reads the job
// subjects.
func (l *Lane) startReading(ctx context.Context) {
	now := l.cfg.Now()
	if l.reading.Load() || now.Before(l.readStart) {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, l.cfg.Deadline)
	defer cancel()
	if l.cfg.OtherReaders != nil {
		other, err := l.cfg.OtherReaders(sctx)
		if err != nil || other != "" {
			l.readStart = now.Add(retryReading)
			l.cfg.Log.Warn("fast lane: not reading arrivals: the jobs stream has a consumer of the job subjects besides the workers', and the lane deletes the jobs it copies",
				"consumer", other, "err", err)
			return
		}
	}
	cons, err := l.arrivalsConsumer(sctx)
	if err != nil {
		l.readStart = now.Add(retryReading)
		l.cfg.Log.Warn("fast lane: cannot read arrivals; a tenant's jobs behind another's backlog wait for it", "consumer", l.cfg.Arrivals, "err", err)
		return
	}
	l.reading.Store(true)
	cc, err := cons.Consume(l.onArrival, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
			// Read again from the stream's end at the next observed backlog.
			l.reading.Store(false)
		}
	}))
	if err != nil {
		l.reading.Store(false)
		l.readStart = now.Add(retryReading)
		l.cfg.Log.Warn("fast lane: cannot read arrivals", "consumer", l.cfg.Arrivals, "err", err)
		return
	}
	l.stopRead = cc.Stop
	l.cfg.Log.Info("fast lane: the jobs consumer has a backlog; reading arrivals", "consumer", l.cfg.Arrivals)
}

// stopReading stops reading arrivals.
func (l *Lane) stopReading() {
	if l.stopRead == nil {
		return
	}
	l.stopRead()
	l.stopRead = nil
	l.reading.Store(false)
	l.cfg.Log.Info("fast lane: no backlog for a while; stopped reading arrivals", "for", l.cfg.IdleOff)
}

// arrivalsConsumer binds the arrivals consumer, creating it when it is
// missing. Every lane asks for the same configuration, so whichever comes
// first creates it and the others bind it. One left from an earlier
// backlog, with many arrivals no lane read, is replaced: they are stale.
func (l *Lane) arrivalsConsumer(ctx context.Context) (jetstream.Consumer, error) {
	js, name := l.cfg.JetStream, l.cfg.Arrivals
	stream := l.cfg.Stream.CachedInfo().Config.Name
	c, err := js.Consumer(ctx, stream, name)
	switch {
	case err == nil:
		if c.CachedInfo().NumPending <= uint64(max(1024, 4*l.cfg.Backlog)) {
			return c, nil
		}
		if err := js.DeleteConsumer(ctx, stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, err
		}
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return nil, err
	}
	cfg := jetstream.ConsumerConfig{
		Durable:           name,
		AckPolicy:         jetstream.AckNonePolicy,
		DeliverPolicy:     jetstream.DeliverNewPolicy,
		HeadersOnly:       true,
		InactiveThreshold: l.cfg.ArrivalsIdle,
		// Its state is worth nothing after a restart, and a replicated
		// consumer would cost a consensus round per arrival.
		Replicas:      1,
		MemoryStorage: true,
	}
	if len(l.cfg.JobSubjects) == 1 {
		cfg.FilterSubject = l.cfg.JobSubjects[0]
	} else {
		cfg.FilterSubjects = l.cfg.JobSubjects
	}
	return js.CreateOrUpdateConsumer(ctx, stream, cfg)
}

// arrival is a job the lane takes.
type arrival struct {
	id, tenant, subject string
	seq                 uint64
	cost                int64
	at                  time.Time // when it arrived
	admitted            bool      // the claim admitted it (else it holds a slot)
}

// onArrival books one arriving job and hands it to Run if the lane takes
// it. It runs on the consumer's delivery goroutine, so it only reads
// headers.
func (l *Lane) onArrival(m jetstream.Msg) {
	meta, err := m.Metadata()
	h := m.Headers()
	if err != nil || h.Get(consumer.HeaderJobID) != "" {
		return // a moved job's copy coming back: it keeps its place
	}
	now := l.cfg.Now()
	l.arrived.Store(now.UnixNano())
	t, err := l.cfg.Tenant.Of(m.Subject(), h)
	if err != nil {
		return // the jobs consumer dead-letters it
	}
	cost, err := consumer.ParseCost(h, l.cfg.CostHeader)
	if err != nil {
		return
	}
	seq := meta.Sequence.Stream
	if now.Sub(meta.Timestamp) > l.cfg.Deadline {
		// Stored while no lane read arrivals: left to the jobs consumer,
		// and its tenant's later jobs behind it.
		l.backlog.leave(t, seq)
		return
	}
	if !l.backlog.book(t, seq, l.cfg.Backlog, l.cfg.TenantShare, now) {
		return
	}
	a := arrival{id: meta.Stream + ":" + strconv.FormatUint(seq, 10), tenant: t, subject: m.Subject(), seq: seq, cost: cost, at: now}
	select {
	case l.work <- a:
	default:
		l.backlog.leave(t, seq)
	}
}

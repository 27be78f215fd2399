package fastlane

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/tenant"
)

// The lane sees jobs arrive through a consumer of its own on the jobs
// stream, Config.Arrivals: a pull consumer of the job subjects that
// delivers headers only and wants no acks, shared by the fleet's lanes
// (each arrival reaches one of them). It is created when a backlog starts,
// delivering from the jobs consumer's position on: the lane first reads
// the backlog itself, which tells it which tenants have jobs queued there
// (a flooding tenant's later jobs must stay behind its earlier ones), then
// every job stored after. It is read while the backlog lasts and left when
// the jobs consumer has had no backlog for IdleOff; the server deletes it
// once it has had no reader for ArrivalsIdle. The stream's configuration
// is never touched.

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
	info, err := l.cfg.Stream.Info(sctx)
	var cons jetstream.Consumer
	if err == nil {
		// What is stored now is the backlog: only what arrives after it
		// may pass it.
		l.readFrom.Store(info.State.LastSeq + 1)
		cons, err = l.arrivalsConsumer(sctx)
	}
	if err != nil {
		l.readStart = now.Add(retryReading)
		l.cfg.Log.Warn("fast lane: cannot read arrivals; a tenant's jobs behind another's backlog wait for it", "consumer", l.cfg.Arrivals, "err", err)
		return
	}
	l.reading.Store(true)
	// Large pulls: a backlog read first can be long, and its headers are
	// small.
	cc, err := cons.Consume(l.onArrival, jetstream.PullMaxMessages(2048), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
			// Read again at the next observed backlog.
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

// arrivalsConsumer binds the arrivals consumer, creating it, when it is
// missing, to deliver from just after the jobs consumer's position. The
// first lane to start creates it and the others bind it. One left from an
// earlier backlog is bound as it is: what it delivers from before the jobs
// consumer's position only tells which tenants had jobs there.
func (l *Lane) arrivalsConsumer(ctx context.Context) (jetstream.Consumer, error) {
	js, name := l.cfg.JetStream, l.cfg.Arrivals
	stream := l.cfg.Stream.CachedInfo().Config.Name
	c, err := js.Consumer(ctx, stream, name)
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return c, err
	}
	jobs, err := l.cfg.Jobs.Info(ctx)
	if err != nil {
		return nil, err
	}
	l.sawDelivered(jobs.Delivered.Stream)
	cfg := jetstream.ConsumerConfig{
		Durable:           name,
		AckPolicy:         jetstream.AckNonePolicy,
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       jobs.Delivered.Stream + 1,
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
	c, err = js.CreateConsumer(ctx, stream, cfg)
	if errors.Is(err, jetstream.ErrConsumerExists) {
		return js.Consumer(ctx, stream, name) // another lane created it first
	}
	return c, err
}

// arrival is a job the lane takes.
type arrival struct {
	id, tenant, subject string
	group               string // "" for none
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
	if err != nil || h.Get(header.JobID) != "" {
		return // a moved job's copy coming back: it keeps its place
	}
	now := l.cfg.Now()
	l.arrived.Store(now.UnixNano())
	t, err := l.cfg.Tenant.Of(m.Subject(), h)
	if err != nil {
		return // the jobs consumer dead-letters it
	}
	cost, err := header.ParseCost(h, l.cfg.CostHeader)
	if err != nil {
		return
	}
	var group string
	if l.cfg.Group != (tenant.Source{}) {
		if group, err = l.cfg.Group.GroupOf(m.Subject(), h); err != nil && (l.cfg.GroupRequired || !errors.Is(err, tenant.ErrMissing)) {
			return // the jobs consumer dead-letters it
		}
	}
	seq := meta.Sequence.Stream
	if l.cfg.Capped != nil && l.cfg.Capped(t) {
		// A job under a running cap runs only holding a lease, which the
		// jobs consumer's decision takes: left to it.
		l.backlog.leave(t, seq)
		return
	}
	if seq < l.readFrom.Load() || now.Sub(meta.Timestamp) > l.cfg.Deadline {
		// Part of the backlog the lane read first (stored before it began
		// reading), or read too late to be taken: left to the jobs
		// consumer, and its tenant's later jobs behind it.
		l.backlog.leave(t, seq)
		return
	}
	if !l.backlog.book(t, seq, l.cfg.Backlog, l.cfg.TenantShare, now) {
		return
	}
	a := arrival{id: meta.Stream + ":" + strconv.FormatUint(seq, 10), tenant: t, group: group, subject: m.Subject(), seq: seq, cost: cost, at: now}
	select {
	case l.work <- a:
	default:
		l.backlog.leave(t, seq)
	}
}

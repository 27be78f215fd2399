// Package fastlane lets the jobs of a tenant with nothing queued pass a
// backlog of other tenants' jobs. A JetStream consumer delivers in stream
// order, so without it a job stored behind another tenant's flood waits
// until the workers have taken in (and deferred) the whole flood.
//
// While the workers' jobs consumer has a backlog (at least Config.Backlog
// jobs left to deliver), each worker's lane reads arrivals: the headers of
// the messages the jobs stream stores, from a consumer of the lane's own
// (Config.Arrivals), shared by the fleet. When a job arrives whose tenant
// has no job queued in that backlog, the lane takes it:
//
//  1. it decides the job at once as its copy (throttle.Decider, with the
//     incarnation fastcopy.Incarnation of the original's sequence),
//     which charges the tenant or reserves its slot and records the copy
//     as the job's owner;
//  2. it checks that the jobs consumer has not delivered the original yet;
//  3. it copies the original to Subjects.Fast, delivered at once by
//     Config.Copies, which the worker pulls beside its jobs consumer;
//  4. it deletes the original from the stream.
//
// The owner record keeps a job from running twice however the lane is
// interrupted: an original delivered after the claim is a Duplicate, acked
// once its copy is stored and handed back until then (SettleClaimed), and
// a claim whose copy was never made is given up once the original is old
// enough that no take can still be under way.
//
// The lane never changes the jobs stream's configuration. It needs delete
// rights on the stream and, for a fast read of originals, direct gets (a
// stream the worker creates has them; otherwise reads go through the
// JetStream API). Package app decides where it may run.
package fastlane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/subject"
	"github.com/throttler/throttler/tenant"
	"github.com/throttler/throttler/throttle"
)

// Decider decides jobs as copies, recording the copy admitted as its
// job's owner; *throttle.Decider satisfies it.
type Decider interface {
	DecideBatch(ctx context.Context, copies []throttle.Copy) []throttle.Result
}

// Owners claims or gives up the owner records of jobs; *throttle.Owners
// satisfies it.
type Owners interface {
	Claim(ctx context.Context, tenant, jobID string, incarnation int64) (claimed bool, owner int64, err error)
	Release(ctx context.Context, tenant, jobID string, incarnation int64) (bool, error)
}

// Config is what a Lane needs. The zero value of each optional field takes
// its default.
type Config struct {
	// JetStream publishes copies and manages the arrivals consumer.
	// Required.
	JetStream jetstream.JetStream
	// Stream is the jobs stream: originals are read from and deleted from
	// it. Required.
	Stream jetstream.Stream
	// Jobs is the workers' jobs consumer, whose position the lane reads.
	// Required.
	Jobs jetstream.Consumer
	// Copies delivers the lane's copies (filtering Subjects.Fasts).
	// Required.
	Copies jetstream.Consumer
	// Arrivals names the consumer the lane reads arrivals from; the lane
	// creates it when a backlog starts and the server deletes it after
	// ArrivalsIdle without a reader. Required.
	Arrivals string
	// JobSubjects are the subjects of the jobs consumer. Required.
	JobSubjects []string
	// Subjects names the copies' subjects (Schedules.Fast). Required.
	Subjects subject.Schedules
	// Tenant says where a job's tenant comes from. Required.
	Tenant tenant.Source
	// Group says where a job's group comes from, as the worker reads it
	// (consumer.Config.Group); the zero Source for none. A job whose group
	// the worker would refuse, or must have and lacks (GroupRequired), is
	// left to the jobs consumer, which dead-letters it.
	Group tenant.Source
	// GroupRequired, with Group, leaves a job without a group to the jobs
	// consumer.
	GroupRequired bool
	// CostHeader names the header carrying a job's cost. Required.
	CostHeader string
	// Decider decides jobs for their copies, without a fleet-wide running
	// cap (its admissions take no lease of it). Required.
	Decider Decider
	// Owners claims jobs for their copies and gives the claims up.
	// Required.
	Owners Owners
	// Capped, when set, reports whether a tenant's jobs run under a running
	// cap, or must be decided by the jobs consumer for another reason (its
	// tenant is paused): the lane leaves them to the jobs consumer, whose
	// decision takes their leases (or parks them).
	Capped func(tenant string) bool
	// OtherReaders, when set, names a consumer of the jobs stream, besides
	// the workers', that reads job subjects, or returns "". The lane takes
	// nothing while there is one: it would never see the jobs the lane
	// deletes. Checked each time a backlog starts.
	OtherReaders func(ctx context.Context) (string, error)
	// Stats receives the lane's counts (jobs taken, decisions asked).
	// Defaults to counts of its own.
	Stats *consumer.Stats
	// Log receives the lane's logs. Defaults to slog.Default().
	Log *slog.Logger
	// Now is the lane's clock. Defaults to time.Now.
	Now func() time.Time
	// Backlog is the fewest jobs the jobs consumer must have left to
	// deliver for the lane to take a job. Defaults to 256.
	Backlog int
	// TenantShare caps one tenant's jobs the lane has taken whose
	// originals the jobs consumer has not reached yet. Defaults to 16.
	TenantShare int
	// MoveRate caps the jobs per second the worker defers out of the jobs
	// consumer while arrivals come in (see Pause). Defaults to
	// DefaultMoveRate; negative means no cap.
	MoveRate int
	// IdleOff is how long the jobs consumer must have had no backlog for
	// the lane to stop reading arrivals. Defaults to 1 minute.
	IdleOff time.Duration
	// ArrivalsIdle is how long the arrivals consumer lives without a
	// reader before the server deletes it. Defaults to 30s.
	ArrivalsIdle time.Duration
	// Deadline bounds one take: its Redis calls and NATS requests.
	// Defaults to 4s.
	Deadline time.Duration
}

// DefaultMoveRate is Config.MoveRate's default: 8,000 deferrals a second
// for each worker. BENCHMARKS.md ("Noisy neighbour") shows why a pace
// helps the lane's jobs, and what it costs.
const DefaultMoveRate = 8000

// Lane is a worker's fast lane; it implements consumer.Lane. Make it with
// New and run it once.
type Lane struct {
	cfg     Config
	work    chan arrival  // jobs booked for taking, for Run
	wake    chan struct{} // asks Run to start reading arrivals
	backlog backlog

	reading   atomic.Bool   // arrivals are being read
	readFrom  atomic.Uint64 // the first stream sequence stored after reading began
	arrived   atomic.Int64  // when the last job arrived, Unix ns
	delivered atomic.Uint64 // the jobs consumer's highest delivered sequence seen: a job at or below it is its
	paceNext  time.Time     // when the deciding loop may go on; Pause only
	stopRead  func()        // stops reading arrivals; Run only
	readStart time.Time     // when a failed start of reading may be retried; Run only
	mu        sync.Mutex    // guards lowSince
	lowSince  time.Time     // since when the backlog has been under Backlog; zero while over it
}

// laneBatch caps the jobs one take handles.
const laneBatch = 64

// New returns a Lane as cfg describes it, or an error naming what cfg is
// missing.
func New(cfg Config) (*Lane, error) {
	if err := missing(
		required{"JetStream", cfg.JetStream == nil}, required{"Stream", cfg.Stream == nil},
		required{"Jobs", cfg.Jobs == nil}, required{"Copies", cfg.Copies == nil},
		required{"Arrivals", cfg.Arrivals == ""}, required{"JobSubjects", len(cfg.JobSubjects) == 0},
		required{"Subjects", cfg.Subjects == ""}, required{"Tenant", cfg.Tenant == (tenant.Source{})},
		required{"CostHeader", cfg.CostHeader == ""}, required{"Decider", cfg.Decider == nil},
		required{"Owners", cfg.Owners == nil},
	); err != nil {
		return nil, fmt.Errorf("fastlane: %w", err)
	}
	setDefault(&cfg.Backlog, 256)
	setDefault(&cfg.TenantShare, 16)
	setDefault(&cfg.MoveRate, DefaultMoveRate)
	setDefault(&cfg.IdleOff, time.Minute)
	setDefault(&cfg.ArrivalsIdle, 30*time.Second)
	setDefault(&cfg.Deadline, 4*time.Second)
	shared(&cfg.Stats, &cfg.Log, &cfg.Now)
	return &Lane{cfg: cfg, work: make(chan arrival, 1024), wake: make(chan struct{}, 1),
		backlog: newBacklog(), lowSince: cfg.Now()}, nil
}

// required is a required field of a configuration, and whether it is
// unset.
type required struct {
	name  string
	unset bool
}

// missing returns an error naming each field of fields that is unset, or
// nil when none is.
func missing(fields ...required) error {
	var names []string
	for _, f := range fields {
		if f.unset {
			names = append(names, f.name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	return errors.New("missing " + strings.Join(names, ", "))
}

// shared gives what a Lane and Claims share their defaults: counts of
// their own, slog.Default() and time.Now.
func shared(stats **consumer.Stats, log **slog.Logger, now *func() time.Time) {
	if *stats == nil {
		*stats = consumer.NewStats(10_000)
	}
	if *log == nil {
		*log = slog.Default()
	}
	if *now == nil {
		*now = time.Now
	}
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Copies is the consumer delivering the lane's copies.
func (l *Lane) Copies() jetstream.Consumer { return l.cfg.Copies }

// Observe records that the jobs consumer delivered the message stored at
// stream sequence seq with pending jobs left to deliver after it, and
// starts reading arrivals when that is a backlog.
func (l *Lane) Observe(seq, pending uint64) {
	over := l.backlog.observe(seq, pending) >= uint64(l.cfg.Backlog)
	l.mu.Lock()
	switch {
	case over:
		l.lowSince = time.Time{}
	case l.lowSince.IsZero():
		l.lowSince = l.cfg.Now()
	}
	l.mu.Unlock()
	if over && !l.reading.Load() {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// Run reads arrivals while the jobs consumer has a backlog and takes the
// jobs they book, a batch at a time, until ctx is cancelled. A take under
// way runs to its end: stopped between its steps, it would leave claims
// to be taken over.
func (l *Lane) Run(ctx context.Context) {
	tick := time.NewTicker(max(10*time.Millisecond, min(5*time.Second, l.cfg.IdleOff/4)))
	defer tick.Stop()
	defer l.stopReading()
	for {
		var batch []arrival
		select {
		case a := <-l.work:
			batch = append(batch, a)
		case <-l.wake:
			l.startReading(ctx)
			continue
		case <-tick.C:
			if l.idle() {
				l.stopReading()
			}
			continue
		case <-ctx.Done():
			return
		}
	more:
		for len(batch) < laneBatch {
			select {
			case a := <-l.work:
				batch = append(batch, a)
			default:
				break more
			}
		}
		l.passBacklog(ctx, batch)
	}
}

// idle reports whether the jobs consumer has had no backlog for IdleOff.
func (l *Lane) idle() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.lowSince.IsZero() && l.cfg.Now().Sub(l.lowSince) >= l.cfg.IdleOff
}

// count adds one to a tenant's counter.
func (l *Lane) count(tenant string, f func(*consumer.TenantStats)) { l.cfg.Stats.Add(tenant, f) }

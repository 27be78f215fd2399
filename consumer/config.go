package consumer

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/subject"
	"github.com/throttler/throttler/tenant"
	"github.com/throttler/throttler/throttle"
)

// Config tunes a Worker. The zero value of each field takes its default.
type Config struct {
	// Tenant says where a job's tenant comes from. Defaults to subject token 2.
	Tenant tenant.Source
	// Group says where a job's group comes from (Job.Group), read with
	// the tenant's rule. Defaults to the zero Source: jobs have no group.
	Group tenant.Source
	// GroupRequired dead-letters a job that carries no group, with the
	// reason; without it such a job has none (Job.Group ""). It applies
	// only with Group set. Defaults to false.
	GroupRequired bool
	// CostHeader names the header carrying a job's cost. Defaults to "Job-Cost".
	CostHeader string
	// Concurrency caps the jobs whose handler runs at once. Defaults to 16.
	Concurrency int
	// FetchBatch caps the messages pulled, and decided, at once; at most
	// twice as many are pulled and not yet decided. Defaults to 64.
	FetchBatch int
	// MaxFailures is the number of handler failures after which a job goes
	// to the dead-letter subject. Defaults to 5.
	MaxFailures int
	// RetryInitial and RetryMax pace retries after a handler failure: the
	// delay before retry n is RetryInitial × 2^(n-1), capped at RetryMax,
	// ±20%. Default to 1s and 5m.
	RetryInitial, RetryMax time.Duration
	// OnRedisError says what to do when a decision fails because of Redis.
	// Defaults to DeferOnRedisError.
	OnRedisError RedisErrorPolicy
	// RedisTimeout bounds one batch decision. Defaults to 2s.
	RedisTimeout time.Duration
	// ShutdownTimeout is how long in-flight jobs may run after Run's context
	// is cancelled before their contexts are cancelled too. Defaults to
	// 25s, which leaves the hand-back and the process's exit room within
	// a 30 s grace period such as Kubernetes' default.
	ShutdownTimeout time.Duration
	// InProgressEvery is how often a running job tells JetStream it is alive
	// (InProgress), so a long handler outlives AckWait. Defaults to 10s.
	InProgressEvery time.Duration
	// DLQSubject is the dead-letter subject template. Defaults to "dlq.{tenant}".
	DLQSubject subject.Template
	// TermWithReason sends the dead-letter reason with Term; servers before
	// 2.10 do not know it. Defaults to false (plain Term).
	TermWithReason bool
	// MaxHold caps how long a RetryAfter from a handler defers its job
	// and holds its tenant back. Defaults to 10m.
	MaxHold time.Duration
	// HoldSubject, when set, is the core NATS subject the fleet's workers
	// tell each other on when a tenant's downstream asked to wait
	// (RetryAfter), so that none starts a job of it admitted before then.
	// Every worker of the fleet must use the same one, and no stream may
	// bind it. Defaults to "" (each worker knows its own holds only).
	HoldSubject string
	// TopSubject, when set, is the core NATS subject on which the worker
	// answers `throttler top` with what it knows of each tenant
	// (Worker.TopRows). Every worker of the fleet must use the same one,
	// and no stream may bind it. Defaults to "" (no answer).
	TopSubject string
	// TopTenants caps the tenants the worker keeps for top; those first
	// seen past it are counted as OtherTenants. Tenants with nothing to
	// show are forgotten. Defaults to 200,000.
	TopTenants int
	// LeaseTTL is the lease TTL of running caps (throttle.CapOptions): the
	// worker renews the leases of running jobs every LeaseTTL/3. Defaults
	// to throttle.DefaultLeaseTTL.
	LeaseTTL time.Duration
	// ShortWait, when positive, is the longest wait of a job the worker
	// keeps for its slot instead of deferring it (shortwait.go): decided
	// again at the slot, it runs on time, on one delivery. Defaults to 0:
	// every wait goes to the Deferrer (as THROTTLER_DEFER=schedule wants,
	// which moves every job that must wait off the consumer).
	ShortWait time.Duration
	// ParkFor is how long a job waiting for a lease stays parked if it is
	// never woken (its waker died between calling it and waking it): then
	// it comes back by itself and queues again. Defaults to 10m, or to 1s
	// without a Waker: the job then comes back that often, and finds its
	// turn held for it when its turn came (throttle.CapOptions.CallTTL).
	ParkFor time.Duration
	// PauseRecheck is how long a paused tenant's job waits off the
	// consumer before it is checked again, when its pause has no end
	// sooner; a resume brings it back at once. Defaults to 1m.
	PauseRecheck time.Duration
	// StatsTenants caps the tenants Stats (and /metrics) count one by one;
	// the counts of tenants first seen after that many go to OtherTenants,
	// so memory stays bounded however many tenants come and go. Defaults
	// to 10,000.
	StatsTenants int
	// Logger receives the worker's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Now is the worker's clock, read where it decides by the time (the
	// shutdown timeout, how long a job has been held). Defaults to
	// time.Now.
	Now func() time.Time
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Tenant == (tenant.Source{}) {
		c.Tenant = tenant.FromSubject(2)
	}
	setDefault(&c.CostHeader, "Job-Cost")
	setDefault(&c.Concurrency, 16)
	setDefault(&c.FetchBatch, 64)
	setDefault(&c.MaxFailures, 5)
	setDefault(&c.RetryInitial, time.Second)
	setDefault(&c.RetryMax, 5*time.Minute)
	setDefault(&c.RedisTimeout, 2*time.Second)
	setDefault(&c.ShutdownTimeout, 25*time.Second)
	setDefault(&c.InProgressEvery, 10*time.Second)
	setDefault(&c.DLQSubject, "dlq.{tenant}")
	setDefault(&c.MaxHold, 10*time.Minute)
	setDefault(&c.StatsTenants, 10_000)
	setDefault(&c.PauseRecheck, time.Minute)
	setDefault(&c.TopTenants, 200_000)
	setDefault(&c.LeaseTTL, throttle.DefaultLeaseTTL)
	setDefault(&c.ParkFor, 10*time.Minute)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Params is everything a Worker needs.
type Params struct {
	// JetStream publishes dead letters. Required.
	JetStream jetstream.JetStream
	// Consumer is the durable pull consumer to read. Required.
	Consumer jetstream.Consumer
	// Decider is the throttle engine. Required.
	Decider Decider
	// Failures counts handler failures. Required.
	Failures FailureCounter
	// Handler runs admitted jobs. Required.
	Handler Handler
	// Holder, when set, holds a tenant back fleet-wide when a handler
	// returns RetryAfter, and lets the job's deferred copy leave the
	// consumer; without one the job is NAK'd until then and only this
	// job waits. *throttle.Holds satisfies it.
	Holder Holder
	// Pauses, when set, says which tenants an operator paused: their jobs
	// are not decided nor started, and wait off the consumer (parked)
	// until resumed. *pause.Set satisfies it.
	Pauses Pauser
	// Unreserver gives up the slots of a paused tenant's jobs (see
	// Unreserver). Defaults to the Decider, when it is an Unreserver.
	Unreserver Unreserver
	// Settler, when set, settles the cost a handler reports after the job
	// ran (SettleCost) when it differs from what the job was charged;
	// without one, reports are ignored. *throttle.Limiter satisfies it.
	Settler Settler
	// Deferrer puts off limited jobs. Defaults to NakDeferrer.
	Deferrer Deferrer
	// Bundles, when set, is the consumer of fired bundles of moved jobs
	// (see ScheduleDeferrer.Bundle); Run unpacks them while it runs.
	Bundles jetstream.Consumer
	// AckPending, when set, follows the jobs consumer's ack-pending count
	// while Run runs (see FairDeferrer.AckPending); /metrics shows it.
	AckPending *AckPending
	// Stats, when set, receives the worker's per-tenant counts, so that a
	// fast lane can count into the same ones. Defaults to NewStats of
	// Config.StatsTenants.
	Stats *Stats
	// Lane, when set, lets the jobs of tenants with nothing queued pass a
	// backlog of other tenants' jobs (see Lane; package fastlane builds
	// one).
	Lane Lane
	// Claims, when set, settles the originals of jobs a lane claimed (see
	// ClaimSettler). Set it whenever a lane may have run on the jobs
	// stream, its own or an earlier worker's.
	Claims ClaimSettler
	// Observer, when set, receives the worker's timings (batch decisions,
	// queue waits, handler runs, throttle waits). Defaults to none.
	Observer Observer
	// Recreate, when set, sets up the stream and the consumers again. Run
	// calls it when a pull finds its consumer deleted (or no one answers
	// for it), so a worker outlives an operator's mistake.
	Recreate func(context.Context) error
	// Leases renews and gives back the leases of jobs admitted under
	// running caps, and hands their turn to waiting jobs (see
	// throttle.Decider.DecideBatch); *throttle.RunningCaps satisfies it.
	// Defaults to the Decider, when it is a Leaser.
	Leases Leaser
	// Levels, when set, calls the jobs waiting for a turn under shared
	// levels (throttle.Queued); *throttle.Shared satisfies it. Defaults to
	// none: a queued job comes back after Config.ParkFor.
	Levels LevelPoker
	// Waker, when set, brings back a parked job (one the Decider told to
	// wait for a lease) when its turn comes. Without one, a parked job
	// comes back after Config.ParkFor and finds its turn held if it came.
	Waker Waker
	// Woken, when set, is the consumer of the jobs the Waker brings back
	// (release.Waker publishes them on Schedules.Woken): Run pulls from it
	// beside the jobs consumer, so a woken job passes any backlog there.
	Woken jetstream.Consumer
	// Config tunes the worker.
	Config Config
}

// Decider decides a batch of jobs, each an incarnation of its job;
// *throttle.Decider satisfies it.
type Decider interface {
	DecideBatch(ctx context.Context, copies []throttle.Copy) []throttle.Result
}

// FailureCounter counts handler failures per job across the fleet;
// *throttle.Failures satisfies it.
type FailureCounter interface {
	// Failed records one more failure of a job and returns the count;
	// below giveUpAt it also gives up the job's owner record if that names
	// incarnation (see throttle.Failures.Failed), so the retry may be
	// moved.
	Failed(ctx context.Context, tenant, jobID string, incarnation, giveUpAt int64) (n int64, released bool, err error)
}

// RedisErrorPolicy says what to do with a job whose decision failed because
// Redis is unreachable or timing out.
type RedisErrorPolicy int

const (
	// DeferOnRedisError defers the job with backoff: never over-admits.
	DeferOnRedisError RedisErrorPolicy = iota
	// AllowOnRedisError admits the job, logged and counted.
	AllowOnRedisError
)

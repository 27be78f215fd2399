package app

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/config"
	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/internal/ops"
	"github.com/throttler/throttler/release"
	"github.com/throttler/throttler/throttle"
)

// deferPath is the deferral the worker uses, chosen at start from
// THROTTLER_DEFER and what the server and the jobs stream support.
type deferPath struct {
	mode           config.DeferMode // DeferNak, DeferAuto or DeferSchedule, as in force
	termWithReason bool
	// movesBack is set when moved jobs may come back: the worker moves jobs,
	// or the stream keeps the moved jobs of an earlier worker.
	movesBack bool
	// maxAge is the jobs stream's MaxAge at start (0: none): no deferred
	// job may sit in the stream that long.
	maxAge time.Duration
}

// deferrer builds the Deferrer of the path; ackPending follows the jobs
// consumer, so that auto moves jobs once NAKs would lose their precision.
func (p deferPath) deferrer(js jetstream.JetStream, cfg *Settings, ackPending *consumer.AckPending) consumer.Deferrer {
	move := consumer.ScheduleDeferrer{
		JetStream: js,
		Subjects:  cfg.Schedules,
		Timeout:   cfg.RedisTimeout + 3*time.Second,
		Bundle:    64,
		MaxWait:   p.maxAge / 2, // a copy comes back long before the stream would drop it
		Lead:      consumer.ScheduleLead,
	}
	switch p.mode {
	case config.DeferSchedule:
		return move
	case config.DeferAuto:
		return &consumer.FairDeferrer{
			Move:        move,
			MoveAfter:   cfg.ScheduleAfter,
			TenantShare: max(1, cfg.MaxAckPending/40),
			MaxNaked:    consumer.NakedPerWorker,
			MaxAge:      p.maxAge,
			AckPending:  ackPending.Count,
		}
	}
	return consumer.NakDeferrer{}
}

// workerConfig is the worker's configuration on this path.
func (p deferPath) workerConfig(cfg *Settings, log *slog.Logger) consumer.Config {
	c := WorkerConfig(cfg, log)
	c.TermWithReason = p.termWithReason
	if p.mode != config.DeferSchedule {
		// A job whose slot is this close waits in the worker, which starts
		// it on its slot: a NAK or a move would bring it back late.
		// `schedule` moves every job that must wait.
		c.ShortWait = consumer.ScheduleLead
	}
	if p.mode == config.DeferNak {
		// No parked copy to wake (waker): consumer.Config's default.
		c.ParkFor = 0
	}
	return c
}

// waker is the worker's Waker on this path: none when it cannot move jobs.
func (p deferPath) waker(js jetstream.JetStream, cfg *Settings) consumer.Waker {
	if p.mode == config.DeferNak {
		return nil
	}
	return &release.Waker{JetStream: js, Subjects: cfg.Schedules}
}

// copies counts the moved jobs waiting in schedules for the census of
// waiting jobs, or is nil when jobs are never moved.
func (p deferPath) copies(js jetstream.JetStream, cfg *Settings) func(context.Context) (int, error) {
	if p.mode == config.DeferNak {
		return nil
	}
	return func(ctx context.Context) (int, error) {
		return ops.WaitingInSchedules(ctx, js, cfg.Stream, cfg.Schedules)
	}
}

// copiesOf counts one tenant's moved jobs waiting in schedules, or is nil
// when jobs are never moved.
func (p deferPath) copiesOf(js jetstream.JetStream, cfg *Settings) func(context.Context, string) (int, error) {
	if p.mode == config.DeferNak {
		return nil
	}
	return func(ctx context.Context, tenant string) (int, error) {
		return ops.WaitingFor(ctx, js, cfg.Stream, cfg.Schedules, tenant)
	}
}

// holdPrefix starts the core NATS subjects the workers tell each other
// about holds on: THROTTLER_SUBJECTS may not overlap it.
const holdPrefix = "_THROTTLER"

// HoldSubject is the subject the workers of cfg's fleet (one jobs stream
// and consumer) tell each other on that a tenant's downstream asked to
// wait.
func HoldSubject(cfg *Settings) string {
	return holdPrefix + "." + cfg.Stream + "." + cfg.Consumer + ".holds"
}

// TopSubject is the subject the workers of cfg's fleet answer
// `throttler top` on.
func TopSubject(cfg *Settings) string {
	return holdPrefix + "." + cfg.Stream + "." + cfg.Consumer + ".top"
}

// parkFor is how long a job waiting for a lease stays parked if never
// woken: the horizon, or the worker's default with none.
func parkFor(maxDefer time.Duration) time.Duration {
	if maxDefer == 0 {
		return 10 * time.Minute
	}
	return maxDefer
}

// WorkerConfig maps the settings onto the worker's configuration.
func WorkerConfig(cfg *Settings, log *slog.Logger) consumer.Config {
	policy := consumer.DeferOnRedisError
	if cfg.OnRedisError == config.OnRedisErrorAllow {
		policy = consumer.AllowOnRedisError
	}
	// Messages pulled and not yet decided count against MaxAckPending: keep
	// them (at most 2×FetchBatch + 2 per worker) to about a quarter of it.
	fetch := min(cfg.FetchBatch, max(1, cfg.MaxAckPending/8))
	return consumer.Config{
		Tenant:          cfg.TenantFrom,
		Group:           cfg.GroupFrom,
		GroupRequired:   cfg.GroupRequired,
		CostHeader:      cfg.CostHeader,
		Concurrency:     cfg.Concurrency,
		FetchBatch:      fetch,
		MaxFailures:     cfg.MaxFailures,
		OnRedisError:    policy,
		RedisTimeout:    cfg.RedisTimeout,
		ShutdownTimeout: cfg.ShutdownTimeout,
		InProgressEvery: max(100*time.Millisecond, cfg.AckWait/3),
		DLQSubject:      cfg.DLQ,
		// A downstream's wait is capped like a reservation; with
		// THROTTLER_MAX_DEFER=0 the worker's default (10m) caps it.
		MaxHold:      cfg.MaxDefer,
		LeaseTTL:     cfg.LeaseTTL,
		HoldSubject:  HoldSubject(cfg),
		TopSubject:   TopSubject(cfg),
		ParkFor:      parkFor(cfg.MaxDefer),
		PauseRecheck: cfg.PauseRecheck,
		StatsTenants: cfg.MetricsTenants,
		Logger:       log,
	}
}

// longWindows lists the specs of rules with a weekly or monthly calendar
// window that reserves jobs ahead (not :dlq): such a job may wait weeks
// for its window.
func longWindows(rules throttle.Rules) []string {
	var out []string
	long := func(p throttle.Policy) bool {
		for _, l := range p.Limits {
			if (l.Unit == "w" || l.Unit == "mo") && !l.DeadLetter {
				return true
			}
		}
		return false
	}
	if long(rules.Default) {
		out = append(out, "default: "+rules.Default.String())
	}
	for name, p := range rules.Tenants {
		if long(p) {
			out = append(out, name+": "+p.String())
		}
	}
	slices.Sort(out)
	return out
}

// warnLongWindows warns when jobs are NAK'd and a weekly or monthly
// window may make one wait past the jobs stream's max age: a NAK'd job
// stays the same message, which the stream then drops, where a moved job
// is copied again before it grows that old.
func (p deferPath) warnLongWindows(rules throttle.Rules, log *slog.Logger) {
	// A month and a day: the longest a job may wait for a monthly window.
	const longestWait = 32 * 24 * time.Hour
	if p.mode != config.DeferNak || p.maxAge == 0 || p.maxAge > longestWait {
		return
	}
	if specs := longWindows(rules); len(specs) > 0 {
		log.Warn("jobs are deferred with NAK only, and a weekly or monthly window may make a job wait longer than the jobs stream keeps messages; use THROTTLER_DEFER=auto on nats-server 2.12 or later so that such jobs are moved (docs/usage.md, Calendar windows)",
			"stream_max_age", p.maxAge.String(), "limits", specs)
	}
}

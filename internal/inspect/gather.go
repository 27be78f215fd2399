package inspect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/ops"
	"github.com/throttler/throttler/limits"
	"github.com/throttler/throttler/pause"
	"github.com/throttler/throttler/subject"
	"github.com/throttler/throttler/throttle"
)

// Sources are the servers and settings Tenant reads: the fleet's, so that
// whoever asks (the CLI, any worker's admin API) gets the same answer.
type Sources struct {
	// JetStream reaches the limits bucket and the jobs stream. Required.
	JetStream jetstream.JetStream
	// Redis holds the buckets and caps. Required.
	Redis throttle.Client
	// LimitsBucket is THROTTLER_LIMITS_BUCKET, "" when off.
	LimitsBucket string
	// Rules are the environment's policies (THROTTLER_DEFAULT_LIMIT,
	// THROTTLER_TENANT_LIMITS), Reader how the workers read bucket values.
	Rules  throttle.Rules
	Reader limits.Reader
	// PauseBucket is THROTTLER_PAUSE_BUCKET, "" when off.
	PauseBucket string
	// KeyPrefix is THROTTLER_KEY_PREFIX.
	KeyPrefix string
	// TimeZone is THROTTLER_TIMEZONE, the zone of the calendar windows
	// that name none; Horizon is THROTTLER_MAX_DEFER, how far ahead the
	// workers reserve (which calendar windows a job may be placed in).
	TimeZone *time.Location
	Horizon  time.Duration
	// MaxRunning is THROTTLER_MAX_RUNNING, 0 for none.
	MaxRunning int64
	// Stream and Schedules name the jobs stream and its schedules.
	Stream    string
	Schedules subject.Schedules
	// Subjects and TenantFromToken are THROTTLER_SUBJECTS and the subject
	// token holding the tenant (0 when a header holds it).
	Subjects        []string
	TenantFromToken int
	// Levels are the environment's policies of the limits above the
	// tenant (THROTTLER_GLOBAL_LIMIT, THROTTLER_GROUP_LIMITS,
	// THROTTLER_DEFAULT_GROUP_LIMIT); GroupFrom is THROTTLER_GROUP_FROM,
	// "" when jobs have no group.
	Levels    throttle.LevelRules
	GroupFrom string
}

// Tenant gathers what the servers hold about tenant t. It only reads; t
// must be valid (tenant.Validate).
func Tenant(ctx context.Context, src Sources, t string) (Report, error) {
	kv, err := limitsBucket(ctx, src)
	if err != nil {
		return Report{}, err
	}
	eff, err := limits.Resolve(ctx, kv, src.Rules, src.Reader, t)
	if err != nil {
		return Report{}, err
	}
	var paused *Paused
	if src.PauseBucket != "" {
		p, err := pause.Get(ctx, pause.Options{JetStream: src.JetStream, Bucket: src.PauseBucket, Stream: src.Stream, Schedules: src.Schedules}, t)
		if err != nil {
			return Report{}, err
		}
		if p != nil {
			paused = &Paused{Pause: *p, Active: p.Active(time.Now())}
		}
	}
	lim, err := throttle.New(src.Redis, throttle.Options{Policies: throttle.Rules{Default: eff.Policy}, Prefix: src.KeyPrefix,
		TimeZone: src.TimeZone, Horizon: src.Horizon})
	if err != nil {
		return Report{}, err
	}
	snap, err := lim.Peek(ctx, t, time.Time{})
	if err != nil {
		return Report{}, err
	}

	r := Report{
		Tenant: t, At: snap.At.UTC(), Limits: cmp.Or(eff.Policy.Limits.String(), noRate(eff.Policy)), Shadow: eff.Policy.Shadow, Source: eff.Source,
		WaitSeconds: snap.Wait.Seconds(), Failures: snap.Failures, Running: eff.Policy.Running, Cap: snap.Cap,
		Paused: paused, Credits: snap.Credits,
	}
	if r.Credits == nil {
		// A balance the limits read here do not draw on, such as when
		// inspect runs without the workers' environment: shown all the
		// same, since the workers may.
		if c, err := lim.Credits(ctx, t); err == nil && c.Exists {
			r.Credits = &c
		}
	}
	if snap.Wait > 0 {
		r.Binding = snap.Binding.String()
	}
	r.Buckets = bucketsOf(snap.Buckets)
	if src.MaxRunning > 0 {
		r.MaxRunning = src.MaxRunning
		if r.Fleet, err = lim.PeekFleetFor(ctx, t, snap.At); err != nil {
			return Report{}, err
		}
	}
	if d := snap.Debt; d != nil {
		r.Debt = &Debt{LaterSeconds: d.Later.Seconds(), PendingJobs: d.Pending, ShiftSeconds: d.Shift.Seconds()}
		for _, b := range r.Buckets {
			// A token bucket's: a window's debt is its count, shown as such.
			if !b.Sliding && !b.Calendar && b.Tokens < 0 && b.ReservedUntil != nil && (r.Debt.InDebtUntil == nil || b.ReservedUntil.After(*r.Debt.InDebtUntil)) {
				r.Debt.InDebtUntil = b.ReservedUntil
			}
		}
	}
	r.WaitsForLease = CapFull(r.Running, r.Cap) || CapFull(r.MaxRunning, r.Fleet)
	moved, err := ops.WaitingFor(ctx, src.JetStream, src.Stream, src.Schedules, t)
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return Report{}, err
	}
	r.Jobs = JobCounts{
		Moved:    Count{N: moved, Exact: true},
		Reserved: Count{N: snap.Reserved, Exact: true},
		Naked:    Count{N: max(0, snap.Reserved-moved)},
	}
	r.StoredJobs = -1
	if src.TenantFromToken > 0 {
		if filters, ok := ops.TenantSubjects(src.Subjects, src.TenantFromToken, t); ok {
			r.StoredJobs, err = ops.StoredJobs(ctx, src.JetStream, src.Stream, filters)
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				r.StoredJobs, err = 0, nil
			}
			if err != nil {
				return Report{}, err
			}
		}
	}
	if r.Levels, err = tenantLevels(ctx, src, kv, t); err != nil {
		return Report{}, err
	}
	r.Seen = traces(r, snap, src)
	return r, nil
}

// limitsBucket opens the limits bucket, nil when it is off or missing.
func limitsBucket(ctx context.Context, src Sources) (jetstream.KeyValue, error) {
	if src.LimitsBucket == "" {
		return nil, nil
	}
	kv, err := src.JetStream.KeyValue(ctx, src.LimitsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the limits bucket: %w", err)
	}
	return kv, nil
}

// bucketsOf writes buckets as a report shows them.
func bucketsOf(buckets []throttle.Bucket) []Bucket {
	var out []Bucket
	for _, b := range buckets {
		v := Bucket{Limit: b.Limit.String(), Tokens: b.Tokens, Burst: b.Limit.Burst, FullAt: b.FullAt.UTC(),
			WaitSeconds: b.Wait.Seconds(), StoredRate: b.StoredRate}
		if !b.ReservedUntil.IsZero() {
			until := b.ReservedUntil.UTC()
			v.ReservedUntil = &until
		}
		if b.Limit.Sliding {
			v.Sliding, v.InSpan, v.Ahead = true, b.InSpan, b.Ahead
			if !b.NextLeaves.IsZero() {
				next := b.NextLeaves.UTC()
				v.NextLeaves = &next
			}
		}
		if b.Limit.Unit != "" {
			start, resets := b.WindowStart.UTC(), b.ResetsAt.UTC()
			v.Calendar, v.InWindow, v.WindowStart, v.ResetsAt = true, b.InWindow, &start, &resets
		}
		out = append(out, v)
	}
	return out
}

// traces lists what the servers hold of tenant r's jobs and limits.
func traces(r Report, snap throttle.Snapshot, src Sources) []string {
	seen := []string{}
	for _, b := range snap.Buckets {
		if b.Stored {
			seen = append(seen, "bucket state in Redis")
			break
		}
	}
	if snap.Reserved > 0 {
		seen = append(seen, "reserved slots")
	}
	if snap.Debt != nil {
		seen = append(seen, "the shift of a settled debt")
	}
	if len(snap.Failures) > 0 {
		seen = append(seen, "handler failures")
	}
	if c := snap.Cap; c != nil && c.Running+c.Called+c.Waiting > 0 {
		seen = append(seen, "leases or jobs waiting for one")
	}
	if r.StoredJobs > 0 {
		seen = append(seen, fmt.Sprintf("%d jobs in stream %s", r.StoredJobs, src.Stream))
	}
	if r.Jobs.Moved.N > 0 {
		seen = append(seen, "jobs moved off the consumer")
	}
	if r.Levels != nil && len(r.Levels.Queues) > 0 {
		seen = append(seen, "jobs waiting for a turn under a shared limit")
	}
	if _, ok := src.Rules.Tenants[r.Tenant]; ok || r.Source.Where == "bucket" || (r.Source.Ignored != nil && r.Source.Ignored.Key == r.Tenant) {
		seen = append(seen, "limits of its own")
	}
	return seen
}

// noRate says what a policy without rate limits holds to, for its limits
// line: a tenant under credits alone is not unlimited.
func noRate(p throttle.Policy) string {
	if p.Credits != throttle.CreditsOff {
		return "none (no rate limit; " + throttle.Policy{Credits: p.Credits}.String() + ")"
	}
	return "none (no rate limit)"
}

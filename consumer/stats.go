package consumer

import (
	"sync"
	"time"

	tenantpkg "github.com/throttler/throttler/tenant"
)

// TenantStats counts what the worker did with one tenant's jobs.
type TenantStats struct {
	// Delivered counts deliveries the worker received.
	Delivered int64
	// Admitted counts jobs the throttle admitted (handler started).
	Admitted int64
	// Deferred counts throttle deferrals.
	Deferred int64
	// Moved counts deferrals that moved the job off the consumer.
	Moved int64
	// Completed counts jobs acked after their handler succeeded.
	Completed int64
	// Failed counts handler failures.
	Failed int64
	// DeadLettered counts jobs sent to the dead-letter subject.
	DeadLettered int64
	// RedisErrors counts decisions that failed because of Redis.
	RedisErrors int64
	// AllowedOnRedisError counts jobs admitted without a decision because
	// Redis failed and the policy is allow.
	AllowedOnRedisError int64
	// RedisCalls counts throttle decisions requested from Redis.
	RedisCalls int64
	// Duplicates counts incarnations of moved jobs acked without running
	// because another incarnation ran.
	Duplicates int64
	// FastLaned counts jobs the fast lane took out of a backlog (see
	// FastLane).
	FastLaned int64
	// DeadLettersCut counts dead letters cut to fit the server's limits,
	// their original too large to carry whole.
	DeadLettersCut int64
	// MovesTooLarge counts deferrals NAK'd instead of moved because the
	// job's copy would be over the server's limits.
	MovesTooLarge int64
	// ShadowLimited counts jobs of a tenant in shadow mode that enforcing
	// would have deferred (each ran at once).
	ShadowLimited int64
	// ShadowWait sums the waits enforcing would have imposed on them.
	ShadowWait time.Duration
	// BadLimits counts values of the tenant's key in the limits bucket
	// that could not be read, and were ignored.
	BadLimits int64
	// DownstreamHolds counts jobs whose handler said the destination asked
	// to wait (RetryAfter): each deferred, and its tenant held back.
	DownstreamHolds int64
	// CapDeferred counts jobs parked to wait for a lease of a running cap.
	CapDeferred int64
	// LevelQueued counts jobs parked to wait for a turn under a shared
	// level (a group's or the global limit).
	LevelQueued int64
	// CreditsWaiting counts jobs parked because their tenant's credits
	// could not cover them.
	CreditsWaiting int64
	// Woken counts parked jobs this worker brought back in their turn.
	Woken int64
	// Running is how many of the tenant's jobs this worker runs (or holds
	// for a handler slot) under a running cap, holding leases: a gauge.
	Running int64
	// LeasesLost counts leases of running jobs found expired when renewed.
	LeasesLost int64
	// HeldBack counts admitted jobs deferred instead of started because
	// their tenant's downstream had asked to wait since.
	HeldBack int64
	// Paused counts jobs deferred because an operator paused their tenant.
	Paused int64
	// SettledCharged sums the cost charged as debt after jobs reported
	// more than they were charged (SettleCost); SettledRefunded the cost
	// given back for jobs that reported less.
	SettledCharged, SettledRefunded int64
}

// OtherTenants stands in for the tenants counted together once a worker
// counts as many tenants one by one as Config.StatsTenants allows.
const OtherTenants = "_other"

// Stats holds TenantStats per tenant, for at most a given number of
// tenants; the counts of tenants first seen after that go to OtherTenants,
// so memory stays bounded however many tenants come and go. Safe for
// concurrent use.
type Stats struct {
	mu      sync.Mutex
	limit   int
	tenants map[string]*TenantStats
}

// NewStats returns Stats counting at most limit tenants one by one.
func NewStats(limit int) *Stats {
	return &Stats{limit: limit, tenants: map[string]*TenantStats{}}
}

// Add applies f to tenant's counters (those of tenant.Invalid when
// tenant is empty).
func (s *Stats) Add(tenant string, f func(*TenantStats)) {
	if tenant == "" {
		tenant = tenantpkg.Invalid
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ts, ok := s.tenants[tenant]
	if !ok {
		if len(s.tenants) >= s.limit {
			tenant = OtherTenants
			ts, ok = s.tenants[tenant]
		}
		if !ok {
			ts = &TenantStats{}
			s.tenants[tenant] = ts
		}
	}
	f(ts)
}

// Snapshot copies all counters.
func (s *Stats) Snapshot() map[string]TenantStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]TenantStats, len(s.tenants))
	for t, ts := range s.tenants {
		out[t] = *ts
	}
	return out
}

// recorder is the worker's one bookkeeper of what befell each job: the
// counters (Stats) and, for throttler top, the waiting tracker's rates,
// waits and dead letters. Every stage records through it, so that a count
// and its top row never disagree on what happened. Safe for concurrent
// use.
type recorder struct {
	stats   *Stats
	waiting *waiting // the topReporter's
	now     func() time.Time
}

// add applies f to tenant's counters.
func (r *recorder) add(tenant string, f func(*TenantStats)) { r.stats.Add(tenant, f) }

// arrived records a job delivered to the worker.
func (r *recorder) arrived(job Job) {
	r.stats.Add(job.Tenant, func(s *TenantStats) { s.Delivered++ })
	r.waiting.arrived(job, r.now())
}

// admitted records a job whose handler starts.
func (r *recorder) admitted(tenant string) {
	r.stats.Add(tenant, func(s *TenantStats) { s.Admitted++ })
	r.waiting.admitted(tenant, r.now())
}

// deferred records a deferral the Deferrer settled: how it waits, for top;
// the caller counts its outcome.
func (r *recorder) deferred(d Deferral) { r.waiting.deferred(d, r.now()) }

// deadLettered records a job dead-lettered, its dead letter cut to fit
// when cut.
func (r *recorder) deadLettered(tenant string, cut bool) {
	r.waiting.deadLettered(tenant, r.now())
	r.stats.Add(tenant, func(s *TenantStats) {
		s.DeadLettered++
		if cut {
			s.DeadLettersCut++
		}
	})
}

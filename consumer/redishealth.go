package consumer

import (
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/throttle"
)

// redisHealth is what the worker knows of Redis answering its decisions:
// the backoff for deferring jobs while it fails, when the outage began,
// and the summary of jobs it failed for, logged once per redisSummaryEvery.
type redisHealth struct {
	log    *slog.Logger
	now    func() time.Time
	policy RedisErrorPolicy
	rec    *recorder

	backoff  *backoff.ExponentialBackOff // deciding loop only
	down     time.Time                   // when Redis began failing, zero while it answers; deciding loop only
	logged   time.Time                   // when a Redis failure was last logged, zero for none this outage; dispatch only
	failures int                         // jobs Redis failed for since; dispatch only
}

// redisSummaryEvery is how often a worker sums up the jobs Redis failed
// for while it keeps failing.
const redisSummaryEvery = 30 * time.Second

// maxRedisBackoff bounds the wait between two tries of a worker whose
// decisions Redis fails: the worker waits it out before it pulls again,
// so it is also how long a worker may stay idle once Redis answers again
// after a long outage. Trying one group that often costs next to nothing.
const maxRedisBackoff = 2 * time.Second

// newRedisHealth returns a redisHealth for a Redis that answers.
func newRedisHealth(log *slog.Logger, now func() time.Time, policy RedisErrorPolicy, rec *recorder) *redisHealth {
	// Options, not fields set afterwards: NewExponentialBackOff resets
	// the current interval to the initial one it is given.
	rb := backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond),
		backoff.WithMaxInterval(maxRedisBackoff), backoff.WithMaxElapsedTime(0))
	return &redisHealth{log: log, now: now, policy: policy, rec: rec, backoff: rb}
}

// decided records whether Redis failed a batch's decision. It returns how
// long to defer the jobs it failed for (zero unless it failed under
// DeferOnRedisError) and whether Redis answers again after an outage.
// Deciding loop only.
func (h *redisHealth) decided(failed bool) (wait time.Duration, back bool) {
	switch {
	case !failed:
		h.backoff.Reset()
		if !h.down.IsZero() {
			// failed_for counts from this worker's first failed decision;
			// the Redis watch's "Redis answers again" says how long Redis
			// itself was down, from its first unanswered call.
			h.log.Info("deciding jobs again", "failed_for", h.now().Sub(h.down).Round(time.Millisecond))
			h.down = time.Time{}
			back = true
		}
	case h.policy == DeferOnRedisError:
		wait = h.backoff.NextBackOff()
	}
	if failed && h.down.IsZero() {
		h.down = h.now()
	}
	return wait, back
}

// take applies the Redis error policy to a job Redis failed to decide
// while the worker runs: admitted (AllowOnRedisError), else put off by
// g.redisWait, which the deciding loop set. Dispatch only.
func (h *redisHealth) take(g *groupActs, it *item, res throttle.Result) bool {
	if g.redisErr == nil {
		g.redisErr = res.Err
	}
	g.redisFailed++
	h.rec.add(it.job.Tenant, func(s *TenantStats) { s.RedisErrors++ })
	if h.policy == AllowOnRedisError {
		h.log.Debug("redis failed; admitting job by policy", "tenant", it.job.Tenant, "job", it.job.ID, "err", res.Err)
		h.rec.add(it.job.Tenant, func(s *TenantStats) { s.AllowedOnRedisError++ })
		g.admitted = append(g.admitted, it)
		return true
	}
	h.log.Debug("redis failed; deferring job", "tenant", it.job.Tenant, "job", it.job.ID, "retry_in", g.redisWait, "err", res.Err)
	settleOrLog(h.log, it.msg, func(m jetstream.Msg) error { return m.NakWithDelay(g.redisWait) })
	return true
}

// dispatched sums up what the policy did with the jobs of a batch Redis
// failed for (failed of them, err the first error, wait the deferral):
// one line when Redis starts failing, then one every redisSummaryEvery
// with the jobs it failed for since, not one per job or group, which would
// flood the log. back resets the summary: Redis answers again. The outage
// itself (cause, how long, when it ends) is logged by the Redis client's
// watch (internal/app). Dispatch only.
func (h *redisHealth) dispatched(back bool, failed int, err error, wait time.Duration) {
	if back {
		h.logged, h.failures = time.Time{}, 0
	}
	if failed == 0 {
		return
	}
	h.failures += failed
	if now := h.now(); h.logged.IsZero() || now.Sub(h.logged) >= redisSummaryEvery {
		if h.policy == AllowOnRedisError {
			h.log.Warn("redis failed; admitting jobs unthrottled by THROTTLER_ON_REDIS_ERROR=allow", "jobs", h.failures, "err", err)
		} else {
			h.log.Warn("redis failed; deferring jobs until it answers (THROTTLER_ON_REDIS_ERROR=defer)", "jobs", h.failures, "retry_in", wait, "err", err)
		}
		h.logged, h.failures = now, 0
	}
}

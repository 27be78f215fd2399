package app

import (
	"time"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/throttle"
)

// engine is the throttle's components a worker wires over its Limiter,
// each its own: the decisions, the owner records, the failure counts, the
// running caps and the downstream holds.
type engine struct {
	// decider decides the worker's jobs, taking the leases of running caps.
	decider *throttle.Decider
	// laneDecider decides the fast lane's jobs: it takes no lease of the
	// fleet's cap, as the lane leaves capped tenants to the worker.
	laneDecider *throttle.Decider
	owners      *throttle.Owners
	failures    *throttle.Failures
	caps        *throttle.RunningCaps
	holds       *throttle.Holds
	// levels are the live policies of the limits above the tenant (the
	// global one, the groups'): THROTTLER_GLOBAL_LIMIT and the group
	// variables, replaced by the limits bucket's _global and group.NAME
	// keys while the worker runs.
	levels throttle.LevelPolicies
	// shared decides the jobs at those levels; nil without levels.
	shared *throttle.Shared
}

// newEngine builds the components over limiter, with the running caps
// cfg sets and failure counts that live failureTTL.
func newEngine(limiter *throttle.Limiter, cfg *Settings, failureTTL time.Duration) (*engine, error) {
	var e engine
	var err error
	if e.owners, err = throttle.NewOwners(limiter); err != nil {
		return nil, err
	}
	if e.failures, err = throttle.NewFailures(limiter, failureTTL); err != nil {
		return nil, err
	}
	if e.holds, err = throttle.NewHolds(limiter, e.owners); err != nil {
		return nil, err
	}
	if e.caps, err = throttle.NewRunningCaps(limiter, throttle.CapOptions{MaxRunning: cfg.MaxRunning, LeaseTTL: cfg.LeaseTTL}); err != nil {
		return nil, err
	}
	if e.decider, err = throttle.NewDecider(limiter, e.caps); err != nil {
		return nil, err
	}
	if e.laneDecider, err = throttle.NewDecider(limiter, nil); err != nil {
		return nil, err
	}
	return &e, nil
}

// withLevels makes the deciders decide every job at the limits above its
// tenant first (levels: the global one, and its group's), sharing each in
// turns (throttle.Shared).
func (e *engine) withLevels(limiter *throttle.Limiter, levels throttle.LevelPolicies) error {
	e.levels = levels
	if levels == nil {
		return nil
	}
	shared, err := throttle.NewShared(limiter, levels, throttle.SharedOptions{})
	if err != nil {
		return err
	}
	e.shared = shared
	e.decider = e.decider.WithLevels(shared)
	// The lane wakes no job: its decisions leave the calls to the
	// workers' pokes.
	e.laneDecider = e.laneDecider.WithLevels(shared.WithoutCalls())
	return nil
}

// levelPoker is the worker's poker of the shared levels, or nil.
func (e *engine) levelPoker() consumer.LevelPoker {
	if e.shared == nil {
		return nil
	}
	return e.shared
}

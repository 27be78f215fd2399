package inspect

import (
	"cmp"
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/limits"
	"github.com/throttler/throttler/throttle"
)

// LevelReport is what inspect finds about a limit above the tenant (the
// global one or a group's, throttle.Level) at one moment.
type LevelReport struct {
	// Level is the level's key: "_global" or "group.NAME".
	Level  string        `json:"level"`
	At     time.Time     `json:"at"`
	Limits string        `json:"limits"`
	Shadow bool          `json:"shadow"`
	Source limits.Source `json:"source"`
	// Buckets are the states of the level's terms now.
	Buckets []Bucket `json:"buckets"`
	// WaitSeconds is how long the terms alone would make a new job wait
	// now, Binding the term that sets it. A job also waits for its turn
	// behind the jobs placed before it in the list.
	WaitSeconds float64 `json:"wait_seconds"`
	Binding     string  `json:"held_by,omitempty"`
	// Queued counts the jobs waiting in the level's list for a turn
	// (exact).
	Queued int64 `json:"queued"`
	// Flows counts the flows (tenants; at the global level, groups for
	// the jobs that have one) with jobs in the list, FlowsExact whether
	// every flow's place was read (throttle.LevelSnapshot).
	Flows      int  `json:"flows_waiting"`
	FlowsExact bool `json:"flows_exact"`
	// NextInLine counts by tenant the jobs among the first HeadRead of the
	// list, the next to be called: the tenants with most, most first.
	NextInLine []throttle.TenantJobs `json:"next_in_line"`
	HeadRead   int                   `json:"head_read"`
	// Passes counts the slots the level granted whose jobs have not
	// passed with them yet; PassesAhead those whose slot is to come.
	Passes      int64 `json:"passes"`
	PassesAhead int64 `json:"passes_ahead"`
	// Note warns that the level applies to no job: a group's, without
	// THROTTLER_GROUP_FROM in the environment inspect read.
	Note string `json:"note,omitempty"`
}

// TenantLevels are the limits above a tenant that apply to its jobs, and
// the levels whose lists hold its jobs waiting for a turn.
type TenantLevels struct {
	// Global is the global limit's spec, "" without one; GlobalSource
	// says where it comes from.
	Global       string         `json:"global,omitempty"`
	GlobalSource *limits.Source `json:"global_source,omitempty"`
	// GroupFrom is THROTTLER_GROUP_FROM, "" when jobs have no group. A
	// group is a job's, read from each job, not the tenant's: inspect
	// --group NAME shows a group's limit.
	GroupFrom string `json:"group_from,omitempty"`
	// Queues are the levels whose queues hold the tenant's jobs waiting
	// for a turn, the global level first. The JSON name is the contract
	// users read (docs/design.md, Glossary).
	Queues []LevelQueue `json:"holding,omitempty"`
}

// LevelQueue is a level's queue of a tenant's jobs waiting for a turn.
type LevelQueue struct {
	// Level is the level's key: "_global" or "group.NAME".
	Level string `json:"level"`
	// Jobs counts the tenant's jobs in the level's list: exact unless
	// the list was too long to read whole.
	Jobs Count `json:"jobs"`
	// Ahead counts the jobs of the list to be called before the
	// tenant's first; Queued every job in the list.
	Ahead  int64 `json:"ahead"`
	Queued int64 `json:"queued"`
}

// noTenants is the policies of a limiter that decides no tenant: the one
// inspect reads a level with.
type noTenants struct{}

// Policy implements throttle.Policies.
func (noTenants) Policy(string) throttle.Policy { return throttle.Policy{} }

// Level gathers what the servers hold about level lv: its policy and
// where it comes from, its terms, the jobs waiting for a turn and their
// flows. It only reads.
func Level(ctx context.Context, src Sources, lv throttle.Level) (LevelReport, error) {
	kv, err := limitsBucket(ctx, src)
	if err != nil {
		return LevelReport{}, err
	}
	return levelIn(ctx, src, kv, lv)
}

// levelIn is Level with the limits bucket already looked up (nil: none).
func levelIn(ctx context.Context, src Sources, kv jetstream.KeyValue, lv throttle.Level) (LevelReport, error) {
	eff, err := limits.ResolveLevel(ctx, kv, src.Levels, src.Reader, lv)
	if err != nil {
		return LevelReport{}, err
	}
	rules := throttle.LevelRules{GlobalPolicy: eff.Policy, Groups: map[string]throttle.Policy{lv.Group: eff.Policy}}
	shared, err := newShared(src, rules)
	if err != nil {
		return LevelReport{}, err
	}
	snap, err := shared.Peek(ctx, lv, time.Time{})
	if err != nil {
		return LevelReport{}, err
	}
	r := LevelReport{
		Level: lv.String(), At: snap.At.UTC(), Limits: cmp.Or(eff.Policy.Limits.String(), "none (no limit: its jobs pass it)"),
		Shadow: eff.Policy.Shadow, Source: eff.Source, Buckets: bucketsOf(snap.Buckets), WaitSeconds: snap.Wait.Seconds(),
		Queued: snap.Queued, Flows: snap.Flows, FlowsExact: snap.FlowsExact, NextInLine: snap.Head, HeadRead: snap.HeadRead,
		Passes: snap.Passes, PassesAhead: snap.PassesAhead,
	}
	if r.NextInLine == nil {
		r.NextInLine = []throttle.TenantJobs{}
	}
	if snap.Wait > 0 {
		r.Binding = snap.Binding.String()
	}
	if lv.Group != "" && src.GroupFrom == "" {
		r.Note = "THROTTLER_GROUP_FROM is unset here: the workers of this environment read no group, so no group's limit applies to their jobs"
	}
	return r, nil
}

// newShared returns the shared levels of the fleet's Redis under rules,
// for reading.
func newShared(src Sources, rules throttle.LevelRules) (*throttle.Shared, error) {
	lim, err := throttle.New(src.Redis, throttle.Options{Policies: noTenants{}, Prefix: src.KeyPrefix, TimeZone: src.TimeZone, Horizon: src.Horizon})
	if err != nil {
		return nil, err
	}
	return throttle.NewShared(lim, rules, throttle.SharedOptions{})
}

// tenantLevels gathers the limits above tenant t that apply to its jobs
// and the levels holding them, nil when there are none of either.
func tenantLevels(ctx context.Context, src Sources, kv jetstream.KeyValue, t string) (*TenantLevels, error) {
	eff, err := limits.ResolveLevel(ctx, kv, src.Levels, src.Reader, throttle.Global)
	if err != nil {
		return nil, err
	}
	shared, err := newShared(src, throttle.LevelRules{})
	if err != nil {
		return nil, err
	}
	queues, err := shared.Queues(ctx, t)
	if err != nil {
		return nil, err
	}
	out := &TenantLevels{GroupFrom: src.GroupFrom}
	if len(eff.Policy.Limits) > 0 {
		out.Global, out.GlobalSource = eff.Policy.String(), &eff.Source
	}
	for _, q := range queues {
		out.Queues = append(out.Queues, LevelQueue{Level: q.Level.String(), Jobs: Count{N: q.Jobs, Exact: q.Exact}, Ahead: q.Ahead, Queued: q.Queued})
	}
	if out.Global == "" && out.GroupFrom == "" && len(out.Queues) == 0 {
		return nil, nil
	}
	return out, nil
}

// Package inspect says why a tenant's jobs wait, from what NATS and Redis
// hold: its effective limits and where they come from, its buckets, the
// wait a new job would get and which limit sets it, its jobs waiting, its
// caps and the shared limits above it holding its jobs; and what a shared
// limit (the global one, a group's) holds. It only reads. `throttler
// inspect` prints a Report or a LevelReport; the admin API (GET
// /api/v1/tenants/{tenant}, /api/v1/levels/{level}) serves them as JSON.
package inspect

import (
	"time"

	"github.com/throttler/throttler/limits"
	"github.com/throttler/throttler/pause"
	"github.com/throttler/throttler/throttle"
)

// Report is what inspect finds about one tenant at one moment.
type Report struct {
	Tenant string        `json:"tenant"`
	At     time.Time     `json:"at"`
	Limits string        `json:"limits"`
	Shadow bool          `json:"shadow"`
	Source limits.Source `json:"source"`
	// Buckets are the tenant's buckets now.
	Buckets []Bucket `json:"buckets"`
	// WaitSeconds is how long a new job would wait now, Binding the limit
	// that sets it.
	WaitSeconds float64 `json:"wait_seconds"`
	Binding     string  `json:"held_by,omitempty"`
	// Jobs counts the tenant's jobs that wait.
	Jobs JobCounts `json:"jobs"`
	// Running is the tenant's running cap (running:N), 0 for none; Cap
	// what it holds now.
	Running int64                 `json:"running_cap,omitempty"`
	Cap     *throttle.CapSnapshot `json:"cap,omitempty"`
	// MaxRunning is the fleet's cap (THROTTLER_MAX_RUNNING), 0 for none;
	// Fleet what it holds now, every tenant's.
	MaxRunning int64                 `json:"max_running,omitempty"`
	Fleet      *throttle.CapSnapshot `json:"fleet_cap,omitempty"`
	// WaitsForLease says a job arriving now would wait for a lease of
	// the tenant's cap or the fleet's, whatever its rate says.
	WaitsForLease bool `json:"waits_for_lease,omitempty"`
	// Credits is the tenant's prepaid balance (the term credits), nil
	// when its policy has none.
	Credits *throttle.CreditBalance `json:"credits,omitempty"`
	// Debt is what costs settled above their charge left the tenant
	// owing, nil when no such debt moved its reserved slots lately.
	Debt *Debt `json:"settle_debt,omitempty"`
	// Paused is the tenant's pause (throttler pause), nil when it has
	// none; a pause whose --until has passed is shown with Active false.
	Paused *Paused `json:"paused,omitempty"`
	// Failures maps each job whose handler failed in the last 24 h to its
	// failures: a count is kept a day after the job's last failure, even
	// once the job has run, so that a job whose success went unacked and
	// fails again keeps counting towards THROTTLER_MAX_FAILURES.
	Failures map[string]int64 `json:"handler_failures,omitempty"`
	// Levels are the limits above the tenant that apply to its jobs (the
	// global limit, groups) and the levels holding its jobs waiting for
	// a turn; nil when there are none of either.
	Levels *TenantLevels `json:"levels,omitempty"`
	// Note warns that the limits come from an environment that sets none;
	// the CLI sets it, as only it reads another process's settings.
	Note string `json:"note,omitempty"`
	// Seen lists the traces the tenant left; none means it was never
	// seen, or not for long.
	Seen []string `json:"seen"`
	// StoredJobs counts the tenant's jobs the jobs stream holds, -1 when
	// they cannot be told apart (tenant from a header, or a subject the
	// tenant's token cannot be found in).
	StoredJobs int `json:"stored_jobs"`
}

// Paused is a tenant's pause as inspect shows it.
type Paused struct {
	pause.Pause
	// Active says the pause holds now (its until, if any, is to come).
	Active bool `json:"active"`
}

// Bucket is one of the tenant's buckets.
type Bucket struct {
	Limit  string    `json:"limit"`
	Tokens float64   `json:"tokens"`
	Burst  int64     `json:"burst"`
	FullAt time.Time `json:"full_at"`
	// ReservedUntil is the bucket's empty time when it lies ahead: the
	// bucket is in debt (Tokens below 0) until then, for the slots
	// reserved and the costs settled above their charge.
	ReservedUntil *time.Time `json:"reserved_until,omitempty"`
	WaitSeconds   float64    `json:"wait_seconds"`
	StoredRate    int64      `json:"stored_rate,omitempty"`
	// Sliding is set for a sliding window: InSpan is the cost units that
	// count now (admitted in the last span or reserved ahead), Ahead the
	// part of them reserved ahead, NextLeaves when the earliest of them
	// leaves the span; Burst is its N.
	Sliding    bool       `json:"sliding,omitempty"`
	InSpan     int64      `json:"in_span,omitempty"`
	Ahead      int64      `json:"reserved_ahead,omitempty"`
	NextLeaves *time.Time `json:"next_leaves,omitempty"`
	// Calendar is set for a calendar window: InWindow is the cost units
	// counted in the window holding now (started at WindowStart), ResetsAt
	// when that window ends; Burst is its N.
	Calendar    bool       `json:"calendar,omitempty"`
	InWindow    int64      `json:"in_window,omitempty"`
	WindowStart *time.Time `json:"window_start,omitempty"`
	ResetsAt    *time.Time `json:"resets_at,omitempty"`
}

// Debt is the debt of costs settled above their charge (a job's
// Throttler-Cost, consumer.SettleCost), as inspect shows it: the debt
// itself is in the buckets (tokens below 0, ReservedUntil ahead), which
// new jobs wait out; a debt also moves the slots reserved before it.
type Debt struct {
	// LaterSeconds is how much later than its slot the most moved of the
	// reserved jobs runs when it comes back; PendingJobs counts the
	// reserved jobs a debt has still to move (exact).
	LaterSeconds float64 `json:"reserved_jobs_run_later_seconds"`
	PendingJobs  int     `json:"reserved_jobs_to_move"`
	// ShiftSeconds is the tenant's shift, the sum of what its debts moved
	// the slots reserved before them, while its key lives.
	ShiftSeconds float64 `json:"shift_seconds"`
	// InDebtUntil is when the last of the token buckets below 0 tokens is
	// paid (empty, no longer in debt), nil when none is: a new job waits
	// until then at least. A window's debt is its count.
	InDebtUntil *time.Time `json:"in_debt_until,omitempty"`
}

// JobCounts are the tenant's waiting jobs, each count saying whether it is
// exact.
type JobCounts struct {
	// Moved wait off the consumer, in schedules of the jobs stream: exact.
	Moved Count `json:"moved"`
	// Reserved hold a reserved slot in Redis, moved or NAK'd: exact.
	Reserved Count `json:"holding_slots"`
	// Naked wait on the consumer, NAK'd: an estimate, the slots held less
	// the jobs moved (a job just back for its slot counts as NAK'd).
	Naked Count `json:"nakd"`
}

// Count is a number and whether it is exact.
type Count struct {
	N     int  `json:"n"`
	Exact bool `json:"exact"`
}

// CapFull reports whether a new job would wait for a lease of a cap of n
// holding c: no room once the jobs ahead of it have theirs.
func CapFull(n int64, c *throttle.CapSnapshot) bool {
	return c != nil && n > 0 && c.Full(n)
}

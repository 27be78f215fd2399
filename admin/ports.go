package admin

import (
	"context"
	"errors"
	"time"

	"github.com/throttler/throttler/internal/inspect"
	"github.com/throttler/throttler/internal/rollcall"
	"github.com/throttler/throttler/throttle"
	"github.com/throttler/throttler/top"
)

// The ports below are what the API asks of the fleet. Each is small, so
// that the handlers are tested with fakes and the worker (internal/app)
// plugs in the real operations. A nil port answers 501: the operation is
// not available in this build.
//
// Errors a port returns are mapped to statuses: ErrBadInput (400),
// ErrNotFound (404), anything else (502: a server of the fleet failed).

// ErrBadInput marks a request the operation refuses as given.
var ErrBadInput = errors.New("bad input")

// ErrNotFound marks something asked for that does not exist.
var ErrNotFound = errors.New("not found")

// Tenants is the fleet's view of every tenant with traffic, as `throttler
// top` shows it: every worker's rows added up.
type Tenants interface {
	// Top returns every tenant any worker knows something of now.
	Top(ctx context.Context) (TopView, error)
}

// TopView is the fleet's tenants at one moment.
type TopView struct {
	At time.Time `json:"at"`
	// Workers counts the workers that answered.
	Workers int         `json:"workers"`
	Rows    []TenantRow `json:"rows"`
}

// TenantRow is one tenant's line of the fleet view, every worker's row
// added up; its JSON is that of `throttler top --json`.
type TenantRow = top.Row

// Inspector says why one tenant's jobs wait (`throttler inspect`), and
// what a limit above the tenants holds (`throttler inspect --global`,
// `--group NAME`).
type Inspector interface {
	Inspect(ctx context.Context, tenant string) (inspect.Report, error)
	InspectLevel(ctx context.Context, level throttle.Level) (inspect.LevelReport, error)
	// InspectLevels reports every limit above the tenants the fleet knows
	// (inspect.Levels).
	InspectLevels(ctx context.Context) ([]inspect.LevelReport, error)
}

// Limits reads and writes tenants' limits in the limits bucket.
type Limits interface {
	// Get returns the limits that apply to tenant and where they come
	// from.
	Get(ctx context.Context, tenant string) (LimitsView, error)
	// Set writes spec as tenant's limits, once the worker's own parser
	// has read it; a spec it refuses matches ErrBadInput, with the
	// parser's message, and nothing is written.
	Set(ctx context.Context, tenant, spec string) (LimitsChange, error)
	// Remove deletes tenant's limits from the bucket, as `throttler
	// limits rm`, so that the environment's apply again; a tenant without
	// a value there is left as it is (Removed false).
	Remove(ctx context.Context, tenant string) (LimitsChange, error)
}

// LimitsView is the limits that apply to a tenant.
type LimitsView struct {
	Tenant string `json:"tenant"`
	// Limits is the policy as the workers read it.
	Limits string `json:"limits"`
	// Where says where it comes from: "bucket", "bucket _default",
	// "THROTTLER_TENANT_LIMITS" or "THROTTLER_DEFAULT_LIMIT".
	Where    string    `json:"where"`
	Revision uint64    `json:"revision,omitempty"`
	Written  time.Time `json:"written,omitzero"`
	// Ignored describes a newer value that could not be read, if any.
	Ignored string `json:"ignored,omitempty"`
}

// LimitsChange is what a write of limits did.
type LimitsChange struct {
	Tenant string `json:"tenant"`
	// Before is what applied before, After the policy written (what
	// applies after a removal).
	Before string `json:"before"`
	After  string `json:"after"`
	// Revision is the revision written; for a removal, the revision of
	// the value removed, as `throttler limits rm` says (the removal is a
	// revision of its own, which the workers log); 0 when a removal found
	// none.
	Revision uint64 `json:"revision"`
	// Removed says whether a removal deleted a value: set by Remove
	// (DELETE) alone, nil for a write.
	Removed *bool `json:"removed,omitempty"`
	// BroughtBack counts the tenant's jobs moved off the consumer for
	// slots under its old limits that the change brought back, to be
	// decided under the new ones.
	BroughtBack int `json:"brought_back"`
}

// Pauser pauses and resumes tenants fleet-wide (`throttler pause`,
// `throttler resume`). Results are returned as the operations give them.
type Pauser interface {
	Pause(ctx context.Context, r PauseRequest) (any, error)
	Resume(ctx context.Context, tenant string) (any, error)
}

// PauseRequest is a pause to write.
type PauseRequest struct {
	Tenant string
	// Reason is shown to whoever inspects the tenant; optional.
	Reason string
	// For, when positive, ends the pause after it; Until, when set, ends
	// it then. Give one or neither.
	For   time.Duration
	Until time.Time
}

// Purger removes a tenant's waiting jobs (`throttler purge`).
type Purger interface {
	// Purge removes them, or with DryRun only counts them; the result
	// carries the count as "removed".
	Purge(ctx context.Context, r PurgeRequest) (any, error)
}

// PurgeRequest says whose waiting jobs to remove.
type PurgeRequest struct {
	Tenant string
	// OlderThan, when positive, removes only jobs first published longer
	// ago than it.
	OlderThan time.Duration
	DryRun    bool
}

// DeadLetters lists, shows, replays and purges dead letters (`throttler
// dlq`).
type DeadLetters interface {
	List(ctx context.Context, f DeadLetterFilter) (any, error)
	// Show returns one dead letter with its headers and the start of its
	// data; a missing one matches ErrNotFound.
	Show(ctx context.Context, id uint64) (any, error)
	Replay(ctx context.Context, s DeadLetterSelection) (any, error)
	Purge(ctx context.Context, s DeadLetterSelection) (any, error)
}

// DeadLetterFilter selects dead letters; its zero value selects all.
type DeadLetterFilter struct {
	Tenant string
	// Reason selects those whose reason contains it, in any case.
	Reason string
	// Since selects those dead-lettered at or after it.
	Since time.Time
	// Limit, when positive, keeps at most that many.
	Limit int
}

// DeadLetterSelection selects dead letters to replay or purge: those of
// IDs if any are given (and the filter then narrows them), else those the
// filter selects.
type DeadLetterSelection struct {
	DeadLetterFilter
	IDs    []uint64
	DryRun bool
}

// Workers lists the fleet's workers that are up (package rollcall).
type Workers interface {
	Workers(ctx context.Context) ([]rollcall.Worker, error)
}

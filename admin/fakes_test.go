package admin_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/throttler/throttler/admin"
	"github.com/throttler/throttler/internal/inspect"
	"github.com/throttler/throttler/internal/rollcall"
	"github.com/throttler/throttler/limits"
	"github.com/throttler/throttler/throttle"
)

// fakeFleet implements every port in memory, recording what it was asked
// to change.
type fakeFleet struct {
	mu      sync.Mutex
	rows    []admin.TenantRow
	tops    int // Top calls
	changes []string
}

func (f *fakeFleet) record(format string, a ...any) (any, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.changes = append(f.changes, fmt.Sprintf(format, a...))
	return map[string]any{"ok": true, "removed": 3}, nil
}

func (f *fakeFleet) Top(context.Context) (admin.TopView, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tops++
	return admin.TopView{At: time.Unix(1000, 0).UTC(), Workers: 2, Rows: append([]admin.TenantRow(nil), f.rows...)}, nil
}

func (f *fakeFleet) Inspect(_ context.Context, t string) (inspect.Report, error) {
	return inspect.Report{Tenant: t, At: time.Unix(1000, 0).UTC(), Limits: "5/s:5", Buckets: []inspect.Bucket{{Limit: "5/s:5", Tokens: 2, Burst: 5}},
		Seen: []string{"bucket state in Redis"}}, nil
}

func (f *fakeFleet) InspectLevel(_ context.Context, lv throttle.Level) (inspect.LevelReport, error) {
	return inspect.LevelReport{Level: lv.String(), At: time.Unix(1000, 0).UTC(), Limits: "500/s:500", Source: limits.Source{Where: "THROTTLER_GLOBAL_LIMIT"},
		Buckets: []inspect.Bucket{{Limit: "500/s:500", Tokens: 2, Burst: 500}}, Queued: 7, Flows: 2, FlowsExact: true,
		NextInLine: []throttle.TenantJobs{{Tenant: "acme", Jobs: 5}, {Tenant: "globex", Jobs: 2}}, HeadRead: 7}, nil
}

func (f *fakeFleet) InspectLevels(ctx context.Context) ([]inspect.LevelReport, error) {
	r, err := f.InspectLevel(ctx, throttle.Global)
	return []inspect.LevelReport{r}, err
}

func (f *fakeFleet) Get(_ context.Context, t string) (admin.LimitsView, error) {
	return admin.LimitsView{Tenant: t, Limits: "5/s:5", Where: "bucket", Revision: 3}, nil
}

func (f *fakeFleet) Remove(_ context.Context, t string) (admin.LimitsChange, error) {
	removed := true
	return admin.LimitsChange{Tenant: t, Before: "5/s:5", After: "100/s", Revision: 3, Removed: &removed}, nil
}

func (f *fakeFleet) Set(_ context.Context, t, spec string) (admin.LimitsChange, error) {
	if spec == "bad" {
		return admin.LimitsChange{}, fmt.Errorf("%w: bad: the parser's message", admin.ErrBadInput)
	}
	_, _ = f.record("limits %s %s", t, spec)
	return admin.LimitsChange{Tenant: t, Before: "5/s:5", After: spec, Revision: 4}, nil
}

func (f *fakeFleet) Pause(_ context.Context, r admin.PauseRequest) (any, error) {
	if !r.Until.IsZero() {
		return f.record("pause %s %q until %s", r.Tenant, r.Reason, r.Until.Format(time.RFC3339))
	}
	return f.record("pause %s %q %s", r.Tenant, r.Reason, r.For)
}

func (f *fakeFleet) Resume(_ context.Context, t string) (any, error) { return f.record("resume %s", t) }

func (f *fakeFleet) Purge(_ context.Context, r admin.PurgeRequest) (any, error) {
	return f.record("purge %s %s %v", r.Tenant, r.OlderThan, r.DryRun)
}

func (f *fakeFleet) List(_ context.Context, flt admin.DeadLetterFilter) (any, error) {
	return []map[string]any{{"id": 7, "tenant": "acme", "reason": "boom", "time": time.Unix(1000, 0).UTC()}}, nil
}

func (f *fakeFleet) Show(_ context.Context, id uint64) (any, error) {
	if id != 7 {
		return nil, fmt.Errorf("%w: no dead letter %d", admin.ErrNotFound, id)
	}
	return map[string]any{"id": 7, "tenant": "acme", "reason": "boom", "time": time.Unix(1000, 0).UTC()}, nil
}

func (f *fakeFleet) Replay(_ context.Context, s admin.DeadLetterSelection) (any, error) {
	return f.record("replay %v %s", s.IDs, s.Tenant)
}

// dlqPurger is fakeFleet's DeadLetters.Purge (fakeFleet's own Purge is
// the tenant purge).
type dlqPurger struct{ *fakeFleet }

func (d dlqPurger) Purge(_ context.Context, s admin.DeadLetterSelection) (any, error) {
	return d.record("dlq purge %v %s", s.IDs, s.Tenant)
}

func (f *fakeFleet) Workers(context.Context) ([]rollcall.Worker, error) {
	return []rollcall.Worker{{ID: "w1", Host: "h", Version: "test", Started: time.Unix(900, 0).UTC(), Ready: true}}, nil
}

// config returns a Config with every port f.
func (f *fakeFleet) config(token string) admin.Config {
	return admin.Config{Token: token, Version: "test", Tenants: f, Inspector: f, Limits: f, Pauser: f, Purger: f,
		DeadLetters: dlqPurger{f}, Workers: f, Logger: slog.New(slog.DiscardHandler)}
}

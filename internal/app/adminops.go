package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/admin"
	"github.com/throttler/throttler/config"
	"github.com/throttler/throttler/internal/ops"
	"github.com/throttler/throttler/pause"
	"github.com/throttler/throttler/throttle"
	"github.com/throttler/throttler/top"
)

// The admin API's ports over the operators' operations: throttler top
// (package top), pause and resume (package pause), purge and the dead
// letters (package ops). Each answers for the whole fleet from NATS and
// Redis, whichever worker serves the request.

// maxDeadLetterData is how much of a dead letter's data the API shows.
const maxDeadLetterData = 4096

// addOperations plugs the operations into c.
func addOperations(c *admin.Config, cfg *Settings, nc *nats.Conn, js jetstream.JetStream, rdb throttle.Client) error {
	c.Tenants = fleetTop{nc: nc, subject: TopSubject(cfg)}
	if cfg.PauseBucket != config.LimitsOff {
		c.Pauser = pauser{pause.Options{JetStream: js, Bucket: cfg.PauseBucket, Stream: cfg.Stream, Schedules: cfg.Schedules}}
	}
	// The parked jobs' places in the caps' and the levels' waiting lists
	// go with them.
	lim, err := throttle.New(rdb, throttle.Options{Policies: cfg.Rules, Prefix: cfg.KeyPrefix, TimeZone: cfg.Location()})
	if err != nil {
		return err
	}
	c.Purger = purger{fleet: cfg.Fleet(js), waiting: lim, levels: lim}
	c.DeadLetters = deadLetters{cfg.Fleet(js)}
	return nil
}

// fleetTop is the admin API's Tenants: every worker's top rows added up.
type fleetTop struct {
	nc      *nats.Conn
	subject string
}

// Top implements admin.Tenants.
func (f fleetTop) Top(ctx context.Context) (admin.TopView, error) {
	v, err := top.Gather(ctx, f.nc, top.Options{Subject: f.subject, N: -1})
	if err != nil {
		return admin.TopView{}, err
	}
	rows := v.Rows
	if rows == nil {
		rows = []admin.TenantRow{} // "rows": [], never null
	}
	return admin.TopView{At: v.At, Workers: v.Workers, Rows: rows}, nil
}

// pauser is the admin API's Pauser.
type pauser struct{ o pause.Options }

// Pause implements admin.Pauser.
func (p pauser) Pause(ctx context.Context, r admin.PauseRequest) (any, error) {
	res, err := pause.Put(ctx, p.o, pause.Request{Tenant: r.Tenant, Reason: r.Reason, For: r.For, Until: r.Until})
	return res, badInput(err, pause.ErrInvalid)
}

// Resume implements admin.Pauser.
func (p pauser) Resume(ctx context.Context, tenant string) (any, error) {
	res, err := pause.Resume(ctx, p.o, tenant)
	return res, badInput(err, pause.ErrInvalid)
}

// purger is the admin API's Purger.
type purger struct {
	fleet   ops.Fleet
	waiting ops.Unwaiter
	levels  ops.Unqueuer
}

// Purge implements admin.Purger.
func (p purger) Purge(ctx context.Context, r admin.PurgeRequest) (any, error) {
	o := ops.PurgeOptions{Tenant: r.Tenant, DryRun: r.DryRun, Waiting: p.waiting, Levels: p.levels}
	if r.OlderThan > 0 {
		o.Before = time.Now().Add(-r.OlderThan)
	}
	rep, err := ops.PurgeTenant(ctx, p.fleet, o)
	if err != nil && rep.Removed > 0 {
		// Part done: say what was removed with the error.
		return nil, fmt.Errorf("%w (removed %d jobs before it)", badInput(err, ops.ErrBadInput), rep.Removed)
	}
	return rep, badInput(err, ops.ErrBadInput)
}

// deadLetters is the admin API's DeadLetters.
type deadLetters struct{ fleet ops.Fleet }

// filter is f as package ops takes it.
func filter(f admin.DeadLetterFilter, ids []uint64) ops.DeadLetterFilter {
	return ops.DeadLetterFilter{Tenant: f.Tenant, Reason: f.Reason, Since: f.Since, Limit: f.Limit, IDs: ids}
}

// List implements admin.DeadLetters.
func (d deadLetters) List(ctx context.Context, f admin.DeadLetterFilter) (any, error) {
	res, err := ops.ListDeadLetters(ctx, d.fleet, filter(f, nil))
	return res, badInput(err, ops.ErrBadInput)
}

// Show implements admin.DeadLetters.
func (d deadLetters) Show(ctx context.Context, id uint64) (any, error) {
	res, err := ops.ShowDeadLetter(ctx, d.fleet, id, maxDeadLetterData)
	if errors.Is(err, ops.ErrNotFound) {
		return nil, admin.ErrNotFound // the API names the id: "dead letter 7: not found"
	}
	return res, badInput(err, ops.ErrBadInput)
}

// Replay implements admin.DeadLetters.
func (d deadLetters) Replay(ctx context.Context, s admin.DeadLetterSelection) (any, error) {
	res, err := ops.ReplayDeadLetters(ctx, d.fleet, ops.ReplayOptions{DeadLetterFilter: filter(s.DeadLetterFilter, s.IDs), DryRun: s.DryRun})
	return res, badInput(err, ops.ErrBadInput)
}

// Purge implements admin.DeadLetters.
func (d deadLetters) Purge(ctx context.Context, s admin.DeadLetterSelection) (any, error) {
	res, err := ops.PurgeDeadLetters(ctx, d.fleet, ops.DeadLetterPurgeOptions{DeadLetterFilter: filter(s.DeadLetterFilter, s.IDs), DryRun: s.DryRun})
	return res, badInput(err, ops.ErrBadInput)
}

// badInput marks err as admin.ErrBadInput when it matches the operation's
// own mark of bad input, so that the API answers 400.
func badInput(err, mark error) error {
	if err != nil && errors.Is(err, mark) && !errors.Is(err, admin.ErrBadInput) {
		return fmt.Errorf("%w: %w", admin.ErrBadInput, err)
	}
	return err
}

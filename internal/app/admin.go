package app

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/admin"
	"github.com/throttler/throttler/internal/inspect"
	"github.com/throttler/throttler/internal/ops"
	"github.com/throttler/throttler/internal/rollcall"
	"github.com/throttler/throttler/throttle"
)

// RollCallSubject is the subject the workers of cfg's fleet answer roll
// calls on (package rollcall).
func RollCallSubject(cfg *Settings) string {
	return holdPrefix + "." + cfg.Stream + "." + cfg.Consumer + ".workers"
}

// Roll-call timings: how long the fleet page waits for the first answer,
// and for more after the last.
const (
	rollCallWait  = time.Second
	rollCallQuiet = 150 * time.Millisecond
)

// newSelf is this worker's answer to the fleet's roll calls, but for its
// readiness: who it is and the limits it read from its environment.
func newSelf(cfg *Settings) rollcall.Worker {
	host, _ := os.Hostname()
	return rollcall.Worker{ID: strings.TrimPrefix(nats.NewInbox(), "_INBOX."), Host: host, Version: Version(), Started: time.Now().UTC(),
		Limits: envLimits(cfg), Rules: envRules(cfg.Rules)}
}

// answerRollCalls answers the fleet's roll calls as the agreement's
// worker, with its readiness, until the returned stop is called.
func answerRollCalls(nc *nats.Conn, cfg *Settings, a *envAgreement, ready *readiness, log *slog.Logger) (stop func()) {
	unanswer, err := rollcall.Answer(nc, RollCallSubject(cfg), func() rollcall.Worker {
		w := a.answer(a.self)
		ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
		defer cancel()
		v := ready.verdict(ctx)
		w.Ready, w.Problems = len(v.problems) == 0, v.problems
		return w
	}, a.asked)
	if err != nil {
		log.Warn("answering roll calls failed; this worker is missing from the console's fleet page", "err", err)
		return func() {}
	}
	return unanswer
}

// startAdmin serves the admin API and console on THROTTLER_ADMIN_ADDR
// until the returned stop is called; with the address empty it does
// nothing. A port that cannot be bound fails the worker's start, as a
// wrong setting.
func startAdmin(cfg *Settings, opts Options, js jetstream.JetStream, log *slog.Logger) (stop func(), err error) {
	if cfg.AdminAddr == "" {
		return func() {}, nil
	}
	ln, err := admin.Listen(cfg.AdminAddr, cfg.AdminToken)
	if err != nil {
		return nil, err
	}
	c := adminConfig(cfg, opts.NATS, js, opts.Redis, log)
	if err := addOperations(&c, cfg, opts.NATS, js, opts.Redis); err != nil {
		_ = ln.Close()
		return nil, err
	}
	srv := admin.New(c)
	log.Info("admin API and console serving", "addr", ln.Addr().String(), "token", cfg.AdminToken != "")
	return admin.Serve(ln, srv, log), nil
}

// adminConfig plugs the fleet's operations into the admin API's ports.
func adminConfig(cfg *Settings, nc *nats.Conn, js jetstream.JetStream, rdb throttle.Client, log *slog.Logger) admin.Config {
	return admin.Config{
		Token:     cfg.AdminToken,
		Version:   Version(),
		Logger:    log,
		Inspector: inspector{cfg.InspectSources(js, rdb)},
		Limits: admin.BucketLimits{
			JetStream: js, Bucket: cfg.InspectSources(js, rdb).LimitsBucket, Stream: cfg.Stream,
			Rules: cfg.Rules, Reader: cfg.LimitsReader(),
			BringBack: func(ctx context.Context, tenant string) (int, error) {
				return ops.BringBackMoved(ctx, cfg.Fleet(js), tenant, ops.BringBackMovedOptions{})
			},
		},
		Workers: workers{nc: nc, subject: RollCallSubject(cfg)},
	}
}

// inspector is the admin API's Inspector: package inspect on the fleet's
// servers.
type inspector struct{ src inspect.Sources }

// Inspect implements admin.Inspector.
func (i inspector) Inspect(ctx context.Context, tenant string) (inspect.Report, error) {
	return inspect.Tenant(ctx, i.src, tenant)
}

// InspectLevel implements admin.Inspector.
func (i inspector) InspectLevel(ctx context.Context, level throttle.Level) (inspect.LevelReport, error) {
	return inspect.Level(ctx, i.src, level)
}

// InspectLevels implements admin.Inspector.
func (i inspector) InspectLevels(ctx context.Context) ([]inspect.LevelReport, error) {
	return inspect.Levels(ctx, i.src)
}

// workers is the admin API's Workers: a roll call of the fleet.
type workers struct {
	nc      *nats.Conn
	subject string
}

// Workers implements admin.Workers.
func (w workers) Workers(ctx context.Context) ([]rollcall.Worker, error) {
	return rollcall.Gather(ctx, w.nc, w.subject, nil, rollCallWait, rollCallQuiet)
}

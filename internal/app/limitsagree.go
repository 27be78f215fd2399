package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/throttler/throttler/internal/rollcall"
)

// envLimits fingerprints the limits a worker reads from its environment
// (the default, the tenants', the global and group limits, their burst and
// time zone): two workers of a fleet that disagree on them decide the same
// tenants at different rates.
func envLimits(cfg *Settings) string {
	h := sha256.New()
	for _, v := range []string{cfg.DefaultLimit, strconv.FormatInt(cfg.DefaultBurst, 10), cfg.TenantLimits,
		cfg.GlobalLimit, cfg.GroupLimits, cfg.DefaultGroupLimit, cfg.TimeZone} {
		h.Write([]byte(v))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// warnLimitsDisagree asks the fleet's roll call once, at start, and warns
// when other workers answer with other environment limits than this one's
// (self): a rollout that changes a limit in the environment, during which
// a tenant whose limit changed is not held to either (docs/usage.md,
// "Changing a limit set in the environment"). Workers too old to say are
// left out.
func warnLimitsDisagree(ctx context.Context, nc *nats.Conn, cfg *Settings, self rollcall.Worker, log *slog.Logger) {
	workers, err := rollcall.Gather(ctx, nc, RollCallSubject(cfg), rollCallWait, rollCallQuiet)
	if err != nil {
		return // the fleet page says why, when asked
	}
	differ := 0
	for _, w := range workers {
		if w.ID != self.ID && w.Limits != "" && w.Limits != self.Limits {
			differ++
		}
	}
	if differ == 0 {
		log.Debug("the workers answering the roll call agree on the limits in their environment", "workers", len(workers))
		return
	}
	log.Warn("other workers of the fleet run with other limits in their environment: until all run the same, a tenant whose limit differs is not held to either; change a limit live with `throttler limits set` around a rollout (docs/usage.md, Changing a limit set in the environment)",
		"workers_differing", differ, "workers", len(workers))
}

package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"maps"
	"slices"

	"github.com/nats-io/nats.go"

	"github.com/throttler/throttler/internal/rollcall"
	"github.com/throttler/throttler/throttle"
)

// envLimits fingerprints the limits a worker reads from its environment,
// as parsed (the default, the tenants', the global and group limits, with
// their bursts; 10/s and 10/s:10 are one limit), and its time zone: two
// workers of a fleet that disagree on them decide the same tenants at
// different rates.
func envLimits(cfg *Settings) string {
	h := sha256.New()
	field := func(k, v string) {
		h.Write([]byte(k))
		h.Write([]byte{0})
		h.Write([]byte(v))
		h.Write([]byte{0})
	}
	policies := func(kind string, def throttle.Policy, each map[string]throttle.Policy) {
		field(kind, def.String())
		for _, name := range slices.Sorted(maps.Keys(each)) {
			field(kind+" "+name, each[name].String())
		}
	}
	policies("tenant", cfg.Rules.Default, cfg.Rules.Tenants)
	policies("group", cfg.Levels.DefaultGroup, cfg.Levels.Groups)
	field("global", cfg.Levels.GlobalPolicy.String())
	field("zone", cfg.TimeZone)
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

package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/config"
	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/limits"
	"github.com/throttler/throttler/throttle"
)

// livePolicies returns the policies the limiter applies, the tenants' and
// the levels' above them: with the limits bucket on, the environment's
// replaced by the bucket's, watched until ctx ends, once the bucket's
// values are in (a worker that decided before would apply the
// environment's limits to tenants with limits of their own); with it off,
// the environment's. It returns nils when ctx ends first. bringer, if
// set, is told of each tenant's limits read at start, and of each change
// since.
func livePolicies(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, rdb throttle.Client, cfg *Settings, replicas int, stats *consumer.Stats,
	bringer *movedBringer, log *slog.Logger) (*limits.Store, throttle.LevelPolicies) {
	if cfg.LimitsBucket == config.LimitsOff {
		return limits.NewStore(cfg.Rules), cfg.Levels
	}
	kv, ok := openBucket(ctx, "limits", cfg.LimitsBucket, func(ctx context.Context) (jetstream.KeyValue, error) {
		return limits.OpenBucket(ctx, js, cfg.LimitsBucket, replicas)
	}, log)
	if !ok {
		return nil, nil
	}
	store := limits.NewStore(cfg.Rules)
	levels := limits.NewLevels(cfg.Levels)
	// Carries a tenant's buckets over to limits of other periods; it needs
	// the function library and the key prefix, no policies of its own.
	carrier, err := throttle.New(rdb, throttle.Options{Policies: cfg.Rules, Prefix: cfg.KeyPrefix, TimeZone: cfg.Location()})
	if err != nil {
		log.Warn("a changed period will start a new bucket: no limiter to carry buckets over", "err", err)
	}
	w := &limits.Watcher{
		Store:        store,
		Levels:       levels,
		Bucket:       kv,
		DefaultBurst: cfg.DefaultBurst,
		ShadowAll:    cfg.Shadow,
		NoCaps:       cfg.Handler == config.HandlerForward,
		Log:          log,
		OnBad:        func(key string) { stats.Add(key, func(s *consumer.TenantStats) { s.BadLimits++ }) },
		Conn:         nc,
	}
	w.BeforeChange = func(ctx context.Context, tenant string, from, to throttle.Policy) {
		if carrier != nil {
			cctx, cancel := context.WithTimeout(ctx, cfg.RedisTimeout)
			defer cancel()
			if err := carrier.Carry(cctx, tenant, from, to, time.Time{}); err != nil {
				log.Warn("carrying a tenant's bucket over to its new limit failed; it starts a new bucket", "tenant", tenant,
					"from", from.String(), "to", to.String(), "err", err)
			}
		}
		if bringer != nil && from.String() != to.String() {
			bringer.changed(ctx, tenant, to)
		}
	}
	if bringer != nil {
		w.Loaded = bringer.loaded
		w.DefaultChanged = func(ctx context.Context) {
			bringer.defaultChanged(ctx, func(tenant string) (throttle.Policy, bool) {
				return store.Policy(tenant), store.FromDefault(tenant)
			})
		}
	}
	go w.Run(ctx)
	select {
	case <-w.Ready():
		return store, levels
	case <-ctx.Done():
		return nil, nil
	}
}

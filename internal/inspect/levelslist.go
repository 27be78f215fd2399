package inspect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/limits"
	"github.com/throttler/throttler/throttle"
)

// maxLevelsListed bounds the levels Levels reports: each costs a few
// Redis reads.
const maxLevelsListed = 200

// Levels reports every limit above the tenants the fleet knows: the
// global level, each group with a limit in the environment or the limits
// bucket, and each level with jobs waiting for a turn in its list (a
// limit since removed included), the global first, then the groups by
// name, at most maxLevelsListed. It only reads.
func Levels(ctx context.Context, src Sources) ([]LevelReport, error) {
	found := map[throttle.Level]bool{throttle.Global: true}
	for g := range src.Levels.Groups {
		found[throttle.Level{Group: g}] = true
	}
	kv, err := limitsBucket(ctx, src)
	if err != nil {
		return nil, err
	}
	if kv != nil {
		// Only the levels' keys: the tenants' may be a hundred thousand.
		keys, err := kv.ListKeysFiltered(ctx, throttle.GlobalKey, throttle.GroupKeyPrefix+">")
		if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, fmt.Errorf("listing the limits bucket: %w", err)
		}
		if keys != nil {
			for k := range keys.Keys() {
				if lv, ok, err := limits.LevelKey(k); ok && err == nil {
					found[lv] = true
				}
			}
			// The lister stops by itself once every key is read: stopping it
			// again only reports its subscription gone.
			_ = keys.Stop()
		}
	}
	shared, err := newShared(src, throttle.LevelRules{})
	if err != nil {
		return nil, err
	}
	listed, err := shared.Listed(ctx)
	if err != nil {
		return nil, err
	}
	for _, lv := range listed {
		found[lv] = true
	}
	levels := make([]throttle.Level, 0, len(found))
	for lv := range found {
		levels = append(levels, lv)
	}
	slices.SortFunc(levels, func(a, b throttle.Level) int { return cmp.Compare(a.Group, b.Group) }) // "" (global) first
	out := make([]LevelReport, 0, min(len(levels), maxLevelsListed))
	for _, lv := range levels[:min(len(levels), maxLevelsListed)] {
		r, err := levelIn(ctx, src, kv, lv)
		if err != nil {
			return nil, fmt.Errorf("inspecting %s: %w", lv, err)
		}
		out = append(out, r)
	}
	return out, nil
}

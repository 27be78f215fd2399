package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/limits"
	"github.com/throttler/throttler/tenant"
	"github.com/throttler/throttler/throttle"
)

// limitsTarget is the key a `throttler limits` command acts on: a
// tenant's (or _default's), or that of a level above the tenants.
type limitsTarget struct {
	key   string
	level *throttle.Level // nil for a tenant's key
}

// parseTarget reads the key argument of `throttler limits`: with --group
// (group), a group's name; else a tenant, _default, _global, or a level's
// key as the bucket names it (group.NAME).
func parseTarget(arg string, group bool) (limitsTarget, error) {
	if group {
		if err := tenant.ValidateGroup(arg); err != nil {
			return limitsTarget{}, fmt.Errorf("--group %s: %w", arg, err)
		}
		lvl := throttle.Level{Group: arg}
		return limitsTarget{key: lvl.String(), level: &lvl}, nil
	}
	if lvl, ok, err := limits.LevelKey(arg); ok {
		if err != nil {
			return limitsTarget{}, err
		}
		return limitsTarget{key: arg, level: &lvl}, nil
	}
	if err := limits.CheckKey(arg); err != nil {
		return limitsTarget{}, err
	}
	return limitsTarget{key: arg}, nil
}

// levelVars are the variables a level's limit may come from.
var levelVars = []string{"THROTTLER_GLOBAL_LIMIT", "THROTTLER_GROUP_LIMITS", "THROTTLER_DEFAULT_GROUP_LIMIT"}

// otherGroups names, in `limits list`, the row of THROTTLER_DEFAULT_GROUP_LIMIT:
// the limit of every group without one of its own.
const otherGroups = throttle.GroupKeyPrefix + "*"

// specOrNone writes p as its spec, or "no limit" for a level without one.
func specOrNone(p throttle.Policy) string {
	if s := p.String(); s != "" {
		return s
	}
	return "no limit"
}

// resolve reads the policy that applies to t's tenant or level, and its
// source, as the workers apply the bucket over this environment.
func (c limitsCLI) resolve(ctx context.Context, t limitsTarget) (limits.Effective, error) {
	if t.level != nil {
		return limits.ResolveLevel(ctx, c.kv, c.cfg.Levels, reader(c.cfg), *t.level)
	}
	return limits.Resolve(ctx, c.kv, c.cfg.Rules, reader(c.cfg), t.key)
}

// limitsRow is one line of `limits list`.
type limitsRow struct{ key, spec, source string }

// list prints each tenant whose name starts with prefix and that has
// limits of its own, in the bucket or in THROTTLER_TENANT_LIMITS, and the
// defaults; then, without a prefix, the levels above the tenants that
// have a limit, in a table of their own. With groups (--group) it prints
// only the levels: the global limit, the groups' default and the groups
// whose name starts with prefix.
func (c limitsCLI) list(ctx context.Context, prefix string, groups bool) error {
	tenants, levels := map[string]limitsRow{}, map[string]limitsRow{}
	for t, p := range c.cfg.Rules.Tenants {
		tenants[t] = limitsRow{t, p.String(), "THROTTLER_TENANT_LIMITS"}
	}
	tenants[limits.DefaultKey] = limitsRow{limits.DefaultKey, c.cfg.Rules.Default.String(), "THROTTLER_DEFAULT_LIMIT"}
	env := c.cfg.Levels
	if len(env.GlobalPolicy.Limits) > 0 {
		levels[throttle.GlobalKey] = limitsRow{throttle.GlobalKey, env.GlobalPolicy.String(), "THROTTLER_GLOBAL_LIMIT"}
	}
	if len(env.DefaultGroup.Limits) > 0 {
		levels[otherGroups] = limitsRow{otherGroups, env.DefaultGroup.String(), "THROTTLER_DEFAULT_GROUP_LIMIT"}
	}
	for g, p := range env.Groups {
		key := throttle.Level{Group: g}.String()
		levels[key] = limitsRow{key, p.String(), "THROTTLER_GROUP_LIMITS"}
	}
	if c.kv != nil {
		// One watch reads every key's latest value in one pass.
		w, err := c.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
		if err != nil {
			return fmt.Errorf("reading the limits bucket: %w", err)
		}
		defer w.Stop()
		for e := range w.Updates() {
			if e == nil {
				break
			}
			spec, source := string(e.Value()), fmt.Sprintf("bucket (revision %d)", e.Revision())
			if p, err := reader(c.cfg).Read(e.Key(), spec); err == nil {
				spec = p.String()
			} else {
				source += ", IGNORED by the workers: " + err.Error() + c.applied(ctx, e.Key())
			}
			rows := tenants
			if _, ok, _ := limits.LevelKey(e.Key()); ok {
				rows = levels
			}
			rows[e.Key()] = limitsRow{e.Key(), spec, source}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("reading the limits bucket: %w", ctx.Err())
		}
	}
	if groups {
		return printRows(c, "LEVEL", levels, func(k string) bool {
			return prefix == "" || strings.HasPrefix(k, throttle.GroupKeyPrefix+prefix) && k != otherGroups
		})
	}
	if err := printRows(c, "TENANT", tenants, func(k string) bool { return strings.HasPrefix(k, prefix) }); err != nil {
		return err
	}
	if prefix != "" || len(levels) == 0 {
		return nil
	}
	fmt.Fprintln(c.out)
	return printRows(c, "LEVEL", levels, func(string) bool { return true })
}

// printRows prints the rows whose key keep accepts, sorted by key, under
// a header naming the first column first.
func printRows(c limitsCLI, first string, rows map[string]limitsRow, keep func(key string) bool) error {
	keys := make([]string, 0, len(rows))
	for k := range rows {
		if keep(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, first+"\tLIMITS\tSOURCE")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", rows[k].key, rows[k].spec, rows[k].source)
	}
	return tw.Flush()
}

// applied says what the workers apply to key's tenant or level instead
// of its ignored value, as "; they apply SPEC from SOURCE", or "" for a
// key that names neither.
func (c limitsCLI) applied(ctx context.Context, key string) string {
	t, err := parseTarget(key, false)
	if err != nil {
		return ""
	}
	e, err := c.resolve(ctx, t)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("; they apply %s from %s", specOrNone(e.Policy), describe(e.Source))
}

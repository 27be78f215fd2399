package app

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/throttler/throttler/config"
	"github.com/throttler/throttler/tenant"
	"github.com/throttler/throttler/throttle"
)

// sharedSpecs says what a shared level's spec may hold, for its problems.
const sharedSpecs = "must be rate and window terms such as 500/s, 500/s:1000 or 500/s+window:1000000/d, and optionally shadow"

// levelRules parses the global, default-group and per-group policies as
// a tenant's are (a limit without :BURST takes THROTTLER_DEFAULT_BURST),
// keeping only what a shared level may hold (ValidateShared), all
// shadowed with THROTTLER_SHADOW. An unset spec is no limit.
func levelRules(cfg *config.Config, add func(name, text string), badBurst bool) throttle.LevelRules {
	burst := cfg.DefaultBurst
	if badBurst {
		burst = 0 // still check the limits' syntax, without blaming them for the burst
	}
	r := throttle.LevelRules{Groups: map[string]throttle.Policy{}}
	parse := func(spec string) (throttle.Policy, error) {
		p, err := throttle.ParsePolicy(spec, burst)
		if err == nil {
			err = p.ValidateShared()
		} else if terr := throttle.SharedSpecError(spec); terr != nil {
			err = terr
		}
		p.Shadow = p.Shadow || cfg.Shadow
		return p, err
	}
	var err error
	if strings.TrimSpace(cfg.GlobalLimit) != "" {
		if r.GlobalPolicy, err = parse(cfg.GlobalLimit); err != nil {
			add("THROTTLER_GLOBAL_LIMIT", sharedSpecs+": "+err.Error())
		}
	}
	if strings.TrimSpace(cfg.DefaultGroupLimit) != "" {
		if r.DefaultGroup, err = parse(cfg.DefaultGroupLimit); err != nil {
			add("THROTTLER_DEFAULT_GROUP_LIMIT", sharedSpecs+": "+err.Error())
		}
	}
	for name, spec := range cfg.GroupLimitSpecs {
		if err := tenant.ValidateGroup(name); err != nil {
			// A job carrying such a group is dead-lettered: a limit for
			// it could never apply.
			add("THROTTLER_GROUP_LIMITS", fmt.Sprintf("group %q must be 1 to %d letters, digits, _ or -, as the worker accepts them", name, tenant.MaxLen))
			continue
		}
		p, err := parse(spec)
		if err != nil {
			add("THROTTLER_GROUP_LIMITS", fmt.Sprintf("must be GROUP=LIMITS entries separated by commas, such as org-1=1000/s,org-2=200/s: group %q: %v", name, err))
			continue
		}
		r.Groups[name] = p
	}
	return r
}

// logLevels says at start-up which limits above the tenant apply, and
// when the limits bucket's _global replaces THROTTLER_GLOBAL_LIMIT (a key
// left from an earlier change would otherwise override the environment
// unseen).
func logLevels(cfg *Settings, levels throttle.LevelPolicies, log *slog.Logger) {
	if levels == nil {
		return
	}
	spec := func(p throttle.Policy) string {
		if len(p.Limits) == 0 {
			return "none"
		}
		return p.String()
	}
	global := levels.Global()
	groups := cfg.GroupFrom != (tenant.Source{})
	if len(global.Limits) == 0 && !groups {
		return
	}
	from := "none"
	if groups {
		from = cfg.GroupFrom.String()
	}
	log.Info("limits above the tenant", "global", spec(global), "group_from", from,
		"groups_configured", len(cfg.Levels.Groups), "default_group", spec(cfg.Levels.DefaultGroup))
	if env := spec(cfg.Levels.GlobalPolicy); spec(global) != env {
		log.Warn("the limits bucket's _global replaces THROTTLER_GLOBAL_LIMIT; throttler limits rm _global restores it",
			"bucket", spec(global), "THROTTLER_GLOBAL_LIMIT", env)
	}
}

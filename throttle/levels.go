package throttle

import (
	"fmt"
	"strings"
)

// Level names a limit above the tenant, shared by many tenants' jobs: the
// global one (Group empty), over every job of the fleet, or a group's,
// over the jobs of the group's tenants (an organisation, a plan, a
// downstream endpoint).
type Level struct {
	// Group is the group's name (tenant.Validate's rule); empty names
	// the global level.
	Group string
}

// Global is the level over every job.
var Global = Level{}

// String names the level as operators write it: "_global" or
// "group.NAME", the keys of the limits bucket.
func (l Level) String() string {
	if l.Group == "" {
		return GlobalKey
	}
	return GroupKeyPrefix + l.Group
}

// GlobalKey is the global level's key in the limits bucket.
const GlobalKey = "_global"

// GroupKeyPrefix starts a group level's key in the limits bucket.
const GroupKeyPrefix = "group."

// LevelPolicies gives the policies of the levels above the tenant. A
// policy without Limits means the level has no limit: its jobs pass it.
// Implementations must be safe for concurrent use and return only
// policies that pass ValidateShared.
type LevelPolicies interface {
	// Global returns the global level's policy.
	Global() Policy
	// Group returns the policy of the group named name.
	Group(name string) Policy
}

// LevelRules are the levels' policies as configured: the global one, each
// named group's, and a default for every other group. LevelRules is
// read-only once built and safe for concurrent use.
type LevelRules struct {
	// GlobalPolicy applies to every job.
	GlobalPolicy Policy
	// DefaultGroup applies to every group without an entry in Groups.
	DefaultGroup Policy
	// Groups holds per-group policies that replace DefaultGroup.
	Groups map[string]Policy
}

// Global implements LevelPolicies.
func (r LevelRules) Global() Policy { return r.GlobalPolicy }

// Group implements LevelPolicies.
func (r LevelRules) Group(name string) Policy {
	if p, ok := r.Groups[name]; ok {
		return p
	}
	return r.DefaultGroup
}

// SharedSpecError returns the error of a shared level's spec that names a
// tenant's terms (running:N, credits, weight:N), or nil: a spec that
// names nothing else fails to parse for want of a rate, and the terms
// are the real fault.
func SharedSpecError(spec string) error {
	var bad []string
	for _, part := range strings.Split(spec, "+") {
		part = strings.TrimSpace(part)
		switch {
		case strings.HasPrefix(part, RunningTerm):
			bad = append(bad, RunningTerm+"N")
		case strings.HasPrefix(part, CreditsTerm):
			bad = append(bad, CreditsTerm)
		case strings.HasPrefix(part, WeightTerm):
			bad = append(bad, WeightTerm+"N")
		}
	}
	return tenantTerms(bad)
}

// tenantTerms is the error of a shared level's spec naming the tenant's
// terms bad, or nil for none.
func tenantTerms(bad []string) error {
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%s: a tenant's terms, not a shared limit's", strings.Join(bad, ", "))
}

// ValidateShared reports whether p can be a shared level's policy: rate
// terms, calendar and sliding windows and shadow only. A running cap,
// credits and a weight belong to a tenant.
func (p Policy) ValidateShared() error {
	var bad []string
	if p.Running > 0 {
		bad = append(bad, RunningTerm+"N")
	}
	if p.Credits != CreditsOff {
		bad = append(bad, CreditsTerm)
	}
	if p.Weight > 1 {
		bad = append(bad, WeightTerm+"N")
	}
	if err := tenantTerms(bad); err != nil {
		return err
	}
	if len(p.Limits) == 0 {
		return nil
	}
	return p.Limits.Validate()
}

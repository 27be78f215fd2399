package config

import "strings"

// levels checks the variables of the limits above the tenant and fills
// GroupFromToken, GroupFromHeader and GroupLimitSpecs. The group's limits
// and GroupRequired name what a job's group is: without GroupFromSpec,
// jobs have none, and setting them is a mistake, not a no-op. What a
// spec may hold is checked by internal/app, with throttle's rules.
func (ck *checker) levels(c *Config) {
	const from = "THROTTLER_GROUP_FROM"
	c.GroupLimitSpecs = ck.limitEntries("THROTTLER_GROUP_LIMITS", "group", "org-1=1000/s,org-2=200/s", c.GroupLimits)
	if strings.TrimSpace(c.GroupFromSpec) != "" {
		c.GroupFromToken, c.GroupFromHeader = ck.source(from, c.GroupFromSpec)
		return
	}
	for _, v := range []struct {
		name string
		set  bool
	}{
		{"THROTTLER_GROUP_LIMITS", strings.TrimSpace(c.GroupLimits) != ""},
		{"THROTTLER_DEFAULT_GROUP_LIMIT", strings.TrimSpace(c.DefaultGroupLimit) != ""},
		{"THROTTLER_GROUP_REQUIRED", c.GroupRequired},
	} {
		if v.set {
			ck.addf(v.name, "needs %s (subject:N or header:NAME), which says what a job's group is; without it jobs have no group", from)
		}
	}
}

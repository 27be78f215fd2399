package throttle

import (
	"errors"
	"fmt"
	"strings"
)

// ShadowTerm is the term of a policy's spec that puts it in shadow mode, as
// in "50/s:100+shadow".
const ShadowTerm = "shadow"

// Policy is everything the limiter applies to one tenant. Policy is a
// value type; its Limits must not be changed once it is shared.
type Policy struct {
	// Limits are the tenant's token buckets: a job is admitted only when
	// every one of them admits it.
	Limits Limits
	// Shadow decides the tenant's jobs against buckets of their own, never
	// the enforced ones, and admits every job: the Decision says what
	// enforcing would have done (Shadow, ShadowWait). Turning it off finds
	// the enforced buckets as shadow mode left them.
	Shadow bool
}

// Validate reports whether p can be applied.
func (p Policy) Validate() error { return p.Limits.Validate() }

// String formats p the way ParsePolicy reads it, e.g. "100/s:200+shadow".
func (p Policy) String() string {
	if p.Shadow {
		return p.Limits.String() + "+" + ShadowTerm
	}
	return p.Limits.String()
}

// ParsePolicy reads a tenant's spec: limits joined by "+" as ParseLimits
// reads them, and optionally the term "shadow" among them, such as
// "50/s:100+10000/d" or "50/s:100+shadow".
func ParsePolicy(s string, defaultBurst int64) (Policy, error) {
	if strings.TrimSpace(s) == "" {
		return Policy{}, errors.New("empty limit")
	}
	var p Policy
	for _, part := range strings.Split(s, "+") {
		if strings.TrimSpace(part) == ShadowTerm {
			if p.Shadow {
				return Policy{}, fmt.Errorf("%q given twice", ShadowTerm)
			}
			p.Shadow = true
			continue
		}
		l, err := ParseLimit(part, defaultBurst)
		if err != nil {
			return Policy{}, err
		}
		p.Limits = append(p.Limits, l)
	}
	if err := p.Validate(); err != nil {
		return Policy{}, fmt.Errorf("limits %q: %w", s, err)
	}
	return p, nil
}

// Policies gives each tenant its policy. Rules is the fixed kind; a source
// that changes while the limiter runs (limits held in a store) is another.
// Policy must be safe for concurrent use and return only policies that
// pass Validate.
type Policies interface {
	Policy(tenant string) Policy
}

// Rules maps tenants to their policies, with a default for every other
// tenant. Rules is read-only once built and safe for concurrent use.
type Rules struct {
	// Default applies to every tenant without an entry in Tenants.
	Default Policy
	// Tenants holds per-tenant policies that replace Default.
	Tenants map[string]Policy
}

// Enforce returns the policy that enforces ls.
func Enforce(ls ...Limit) Policy { return Policy{Limits: ls} }

// Policy returns the policy that applies to tenant.
func (r Rules) Policy(tenant string) Policy {
	if p, ok := r.Tenants[tenant]; ok {
		return p
	}
	return r.Default
}

// Validate reports whether every policy in r can be applied.
func (r Rules) Validate() error {
	if err := r.Default.Validate(); err != nil {
		return fmt.Errorf("default limits: %w", err)
	}
	for t, p := range r.Tenants {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("limits of tenant %q: %w", t, err)
		}
	}
	return nil
}

// ParseTenantPolicies reads per-tenant policies written as
// "acme=50/s:100+10000/d,globex=5/m+shadow".
func ParseTenantPolicies(s string, defaultBurst int64) (map[string]Policy, error) {
	out := map[string]Policy{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, entry := range strings.Split(s, ",") {
		tenant, spec, ok := strings.Cut(entry, "=")
		tenant = strings.TrimSpace(tenant)
		if !ok || tenant == "" {
			return nil, fmt.Errorf("entry %q: want TENANT=LIMITS, e.g. acme=50/s:100", entry)
		}
		if _, dup := out[tenant]; dup {
			return nil, fmt.Errorf("tenant %q given twice", tenant)
		}
		p, err := ParsePolicy(spec, defaultBurst)
		if err != nil {
			return nil, fmt.Errorf("tenant %q: %w", tenant, err)
		}
		out[tenant] = p
	}
	return out, nil
}

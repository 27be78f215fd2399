package throttle

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ShadowTerm is the term of a policy's spec that puts it in shadow mode, as
// in "50/s:100+shadow".
const ShadowTerm = "shadow"

// RunningTerm starts the term of a policy's spec that caps how many of the
// tenant's jobs run at once, as in "50/s:100+running:5".
const RunningTerm = "running:"

// SlidingTerm starts the term of a policy's spec that is a sliding window
// log, as in "50/s:100+sliding:1000/1m": at most N cost units in any span
// of the duration (Limit.Sliding).
const SlidingTerm = "sliding:"

// CreditsTerm is the term of a policy's spec that draws the tenant's
// jobs' cost from a prepaid balance, as in "10/s+credits"; written
// "credits:dlq", a job the balance
// cannot cover is dead-lettered instead of waiting.
const CreditsTerm = "credits"

// creditsDLQ is the spec of CreditsDeadLetter.
const creditsDLQ = CreditsTerm + ":dlq"

// CreditsMode says whether and how a policy draws its jobs' cost from the
// tenant's prepaid balance (Limiter.AddCredits).
type CreditsMode int

// The credits modes.
const (
	// CreditsOff: the tenant has no balance; its jobs draw on none.
	CreditsOff CreditsMode = iota
	// CreditsWait (the term "credits"): a job the balance cannot cover is
	// Unfunded and waits, in order, until a top-up covers it.
	CreditsWait
	// CreditsDeadLetter (the term "credits:dlq"): a job the balance cannot
	// cover is Unfunded, and the worker dead-letters it
	// (Decision.CreditsDeadLetter).
	CreditsDeadLetter
)

// String writes m as a spec's term: "credits", "credits:dlq", or "" for
// CreditsOff.
func (m CreditsMode) String() string {
	switch m {
	case CreditsOff:
		return ""
	case CreditsWait:
		return CreditsTerm
	case CreditsDeadLetter:
		return creditsDLQ
	}
	return "CreditsMode(" + strconv.Itoa(int(m)) + ")"
}

// WeightTerm starts the term of a policy's spec that scales the tenant's
// share of a shared limit, as in "50/s+weight:3" (Policy.Weight).
const WeightTerm = "weight:"

// MaxWeight is the largest Weight a policy may set.
const MaxWeight = 1000

// MaxRunning is the largest cap a policy's Running may set.
const MaxRunning = 1_000_000

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
	// Running, when positive, caps how many of the tenant's jobs run at
	// once, fleet-wide: a job runs only holding one of Running leases
	// (see Decider and RunningCaps). 0 means no cap. A policy may have a
	// cap and no Limits: its jobs are then bounded in number, not in rate.
	Running int64
	// Credits, when not CreditsOff, draws each job's cost from the
	// tenant's prepaid balance before its limits decide it (see
	// Limiter.AddCredits). A policy may have credits and no Limits.
	Credits CreditsMode
	// Weight scales the tenant's share of a shared limit (a group's or the
	// global one, Level) when that limit binds: a tenant of weight 2 is
	// given twice the turns of a tenant of weight 1. 0 means 1.
	Weight int64
}

// Validate reports whether p can be applied.
func (p Policy) Validate() error {
	if p.Running < 0 || p.Running > MaxRunning {
		return fmt.Errorf("running cap %d out of range [1, %d]", p.Running, MaxRunning)
	}
	if p.Credits < CreditsOff || p.Credits > CreditsDeadLetter {
		return fmt.Errorf("credits mode %d unknown", int(p.Credits))
	}
	if p.Weight < 0 || p.Weight > MaxWeight {
		return fmt.Errorf("weight %d out of range [1, %d]", p.Weight, MaxWeight)
	}
	if len(p.Limits) == 0 && (p.Running > 0 || p.Credits != CreditsOff) {
		return nil
	}
	return p.Limits.Validate()
}

// String formats p the way ParsePolicy reads it, e.g.
// "100/s:200+credits+running:5+weight:3+shadow". A weight of 1 is the
// default and is not written.
func (p Policy) String() string {
	var terms []string
	if len(p.Limits) > 0 {
		terms = append(terms, p.Limits.String())
	}
	if p.Credits != CreditsOff {
		terms = append(terms, p.Credits.String())
	}
	if p.Running > 0 {
		terms = append(terms, RunningTerm+strconv.FormatInt(p.Running, 10))
	}
	if p.Weight > 1 {
		terms = append(terms, WeightTerm+strconv.FormatInt(p.Weight, 10))
	}
	if p.Shadow {
		terms = append(terms, ShadowTerm)
	}
	return strings.Join(terms, "+")
}

// ParsePolicy reads a tenant's spec: limits joined by "+" as ParseLimits
// reads them, sliding windows "sliding:N/DURATION" (ParseSliding), and
// optionally the terms "credits" or "credits:dlq" (a prepaid balance),
// "running:N" (a cap on the jobs running at once), "weight:N" (the
// tenant's share of a shared limit) and "shadow" among them, such as
// "50/s:100+10000/d", "50/s:100+sliding:500/1m", "10/s+credits",
// "credits:dlq", "50/s:100+running:5", "running:2", "50/s+weight:3" or
// "50/s:100+shadow". A weight is not a limit: a spec of a weight alone
// is refused as one without limits.
func ParsePolicy(s string, defaultBurst int64) (Policy, error) {
	if strings.TrimSpace(s) == "" {
		return Policy{}, errors.New("empty limit")
	}
	var p Policy
	prev := ""
	for _, part := range strings.Split(s, "+") {
		after := prev
		prev = part
		if strings.TrimSpace(part) == ShadowTerm {
			if p.Shadow {
				return Policy{}, fmt.Errorf("%q given twice", ShadowTerm)
			}
			p.Shadow = true
			continue
		}
		if t := strings.TrimSpace(part); t == CreditsTerm || strings.HasPrefix(t, CreditsTerm+":") {
			if p.Credits != CreditsOff {
				return Policy{}, fmt.Errorf("%q given twice", CreditsTerm)
			}
			switch t {
			case CreditsTerm:
				p.Credits = CreditsWait
			case creditsDLQ:
				p.Credits = CreditsDeadLetter
			default:
				return Policy{}, fmt.Errorf("%q: want %s or %s", part, CreditsTerm, creditsDLQ)
			}
			continue
		}
		if n, ok := strings.CutPrefix(strings.TrimSpace(part), RunningTerm); ok {
			if p.Running > 0 {
				return Policy{}, fmt.Errorf("%q given twice", RunningTerm+"N")
			}
			v, err := parseCount(n)
			if err != nil || v > MaxRunning {
				return Policy{}, fmt.Errorf("%q: want running:N, N a whole number from 1 to %d", part, MaxRunning)
			}
			p.Running = v
			continue
		}
		if n, ok := strings.CutPrefix(strings.TrimSpace(part), WeightTerm); ok {
			if p.Weight > 0 {
				return Policy{}, fmt.Errorf("%q given twice", WeightTerm+"N")
			}
			v, err := parseCount(n)
			if err != nil || v > MaxWeight {
				return Policy{}, fmt.Errorf("%q: want weight:N, N a whole number from 1 to %d", part, MaxWeight)
			}
			p.Weight = v
			continue
		}
		if w, ok := strings.CutPrefix(strings.TrimSpace(part), CalendarTerm); ok {
			l, err := ParseCalendar(w)
			if err != nil {
				return Policy{}, err
			}
			p.Limits = append(p.Limits, l)
			continue
		}
		if w, ok := strings.CutPrefix(strings.TrimSpace(part), SlidingTerm); ok {
			l, err := ParseSliding(w)
			if err != nil {
				return Policy{}, err
			}
			p.Limits = append(p.Limits, l)
			continue
		}
		l, err := ParseLimit(part, defaultBurst)
		if err != nil {
			if _, zone, ok := strings.Cut(after, "@"); ok && strings.HasSuffix(zone, "GMT") {
				// Etc/GMT+5 and the like: the + split the zone.
				return Policy{}, fmt.Errorf("%w (a + joins terms, so it cut the time zone %q in two: name a city's zone instead)", err, zone+"+"+part)
			}
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

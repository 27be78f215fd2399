package app

import (
	"fmt"
	"os"
	"strings"

	"github.com/caarlos0/env/v10"

	"github.com/throttler/throttler/config"
	"github.com/throttler/throttler/subject"
	"github.com/throttler/throttler/tenant"
	"github.com/throttler/throttler/throttle"
)

// Settings is the configuration read with the rules of the packages it
// configures: limits as throttle parses them, the tenant as package tenant
// finds it, subjects as package subject reads them. A Settings is
// read-only once loaded.
type Settings struct {
	*config.Config
	// Rules holds DefaultLimit, DefaultBurst and TenantLimits parsed.
	Rules throttle.Rules
	// TenantFrom is where a job's tenant comes from.
	TenantFrom tenant.Source
	// Levels holds GlobalLimit, DefaultGroupLimit and GroupLimits parsed
	// (with DefaultBurst): the limits above the tenant as configured,
	// which the keys _global and group.NAME of the limits bucket replace.
	// A policy without Limits is no limit.
	Levels throttle.LevelRules
	// GroupFrom is where a job's group comes from; the zero Source when
	// THROTTLER_GROUP_FROM is unset: jobs then have no group.
	GroupFrom tenant.Source
	// Forward and DLQ are the forward and dead-letter subject templates.
	Forward, DLQ subject.Template
	// Schedules names the subjects moved jobs are kept on.
	Schedules subject.Schedules
}

// LoadSettings reads the settings from the process environment. On
// failure it returns nil and an error listing every problem, one line
// each, starting with the variable's name.
func LoadSettings() (*Settings, error) {
	return LoadSettingsFrom(env.ToMap(os.Environ()))
}

// LoadSettingsFrom is LoadSettings reading the variables from vars; a
// variable missing from vars, or empty, takes its default.
func LoadSettingsFrom(vars map[string]string) (*Settings, error) {
	cfg, problems := config.Parse(vars)
	s, more := settle(cfg, problems)
	if problems = append(problems, more...); len(problems) > 0 {
		return nil, problems.Err()
	}
	return s, nil
}

// settle reads cfg with the packages' rules, skipping the variables that
// already have a problem, and returns the Settings and what else is wrong.
func settle(cfg *config.Config, failed config.Problems) (*Settings, config.Problems) {
	var ps config.Problems
	add := func(name, text string) {
		if !failed.Has(name) {
			ps = append(ps, config.Problem{Var: name, Text: text})
		}
	}
	s := &Settings{Config: cfg, Schedules: subject.Schedules(cfg.ScheduleSubject)}

	// Subjects first: the tenant source and the outputs are read against them.
	var subjects []string
	for _, subj := range cfg.Subjects {
		if err := subject.Validate(subj, true); err != nil {
			add("THROTTLER_SUBJECTS", "must be subjects separated by commas, such as jobs.>: "+err.Error())
			continue
		}
		if reserved := reservedSubject(subj); reserved != "" {
			add("THROTTLER_SUBJECTS", fmt.Sprintf("%q overlaps %s, which NATS keeps for itself and JetStream will not store; choose job subjects such as jobs.>", subj, reserved))
		}
		if subject.Overlap(subj, holdPrefix+".>") {
			add("THROTTLER_SUBJECTS", fmt.Sprintf("%q overlaps %s.>, where the workers tell each other about held tenants; choose job subjects such as jobs.>", subj, holdPrefix))
		}
		subjects = append(subjects, subj)
	}

	s.TenantFrom = source("THROTTLER_TENANT_FROM", cfg.TenantFromSpec, cfg.TenantFromToken, cfg.TenantFromHeader, subjects, add)
	s.GroupFrom = source("THROTTLER_GROUP_FROM", cfg.GroupFromSpec, cfg.GroupFromToken, cfg.GroupFromHeader, subjects, add)

	s.Rules = rules(cfg, add, failed.Has("THROTTLER_DEFAULT_BURST"))
	s.Levels = levelRules(cfg, add, failed.Has("THROTTLER_DEFAULT_BURST"))
	if cfg.Handler == config.HandlerForward {
		const why = "running:N needs THROTTLER_HANDLER=http: a forwarded job ends when it is published, so the worker cannot see how many run"
		if s.Rules.Default.Running > 0 {
			add("THROTTLER_DEFAULT_LIMIT", fmt.Sprintf("%s; got %q", why, cfg.DefaultLimit))
		}
		for name, p := range s.Rules.Tenants {
			if p.Running > 0 {
				add("THROTTLER_TENANT_LIMITS", fmt.Sprintf("%s; tenant %q has %q", why, name, cfg.TenantLimitSpecs[name]))
			}
		}
	}
	s.Forward, s.DLQ = outputs(cfg, subjects, add)
	return s, ps
}

// source is where variable name (spec, parsed as token or header) says a
// job's tenant or group comes from; a subject token must be one every
// subject in subjects has. Neither set gives the zero Source.
func source(name, spec string, token int, header string, subjects []string, add func(name, text string)) tenant.Source {
	switch {
	case header != "":
		return tenant.FromHeader(header)
	case token > 0:
		for _, subj := range subjects {
			if !subject.HasToken(subj, token) {
				add(name, fmt.Sprintf("%q names token %d, but subject %q in THROTTLER_SUBJECTS has only %d tokens",
					spec, token, subj, strings.Count(subj, ".")+1))
			}
		}
		return tenant.FromSubject(token)
	}
	return tenant.Source{}
}

// reservedSubject returns the subjects NATS keeps for itself (its
// JetStream API and clustering, the system account) that subj overlaps, or
// "": a stream that acks what it stores refuses them.
func reservedSubject(subj string) string {
	for _, r := range []string{"$JS.>", "$JSC.>", "$NRG.>", "$SYS.>"} {
		if subject.Overlap(subj, r) {
			return r
		}
	}
	return ""
}

// rules parses the default and per-tenant policies, all shadowed with
// THROTTLER_SHADOW.
func rules(cfg *config.Config, add func(name, text string), badBurst bool) throttle.Rules {
	burst := cfg.DefaultBurst
	if badBurst {
		burst = 0 // still check the limits' syntax, without blaming them for the burst
	}
	var r throttle.Rules
	var err error
	if r.Default, err = throttle.ParsePolicy(cfg.DefaultLimit, burst); err != nil {
		add("THROTTLER_DEFAULT_LIMIT", "must be terms such as 100/s, 6000/m+50000/d, 100/s:200, sliding:50/10s, window:1000/d or credits: "+err.Error())
	}
	r.Default.Shadow = r.Default.Shadow || cfg.Shadow
	r.Tenants = map[string]throttle.Policy{}
	for name, spec := range cfg.TenantLimitSpecs {
		if err := tenant.Validate(name); err != nil {
			// The worker dead-letters jobs of such a tenant: a limit for
			// it could never apply.
			add("THROTTLER_TENANT_LIMITS", fmt.Sprintf("tenant %q must be 1 to %d letters, digits, _ or -, as the worker accepts them", name, tenant.MaxLen))
			continue
		}
		p, err := throttle.ParsePolicy(spec, burst)
		if err != nil {
			add("THROTTLER_TENANT_LIMITS", fmt.Sprintf("must be TENANT=LIMITS entries separated by commas, such as acme=50/s:100+10000/d: tenant %q: %v", name, err))
			continue
		}
		p.Shadow = p.Shadow || cfg.Shadow
		r.Tenants[name] = p
	}
	return r
}

// outputs checks the subjects the worker publishes to and keeps jobs on:
// each must be valid and none may be captured by the subjects it
// consumes; unless it only NAKs, the forward and dead-letter subjects must
// lie outside the schedule prefix too, where moved jobs are kept.
func outputs(cfg *config.Config, subjects []string, add func(name, text string)) (forward, dlq subject.Template) {
	type output struct {
		name, subject string // the variable, and the subject as shown
		template      string // with {tenant} placeholders
	}
	var outs []output
	templates := map[string]*subject.Template{"THROTTLER_FORWARD_SUBJECT": &forward, "THROTTLER_DLQ_SUBJECT": &dlq}
	for _, o := range []struct{ name, value string }{
		{"THROTTLER_FORWARD_SUBJECT", cfg.ForwardSubject},
		{"THROTTLER_DLQ_SUBJECT", cfg.DLQSubject},
	} {
		t, err := subject.ParseTemplate(o.value)
		if err != nil {
			add(o.name, "must be a subject template whose only placeholder is {tenant}, such as done.{tenant}: "+err.Error())
			continue
		}
		*templates[o.name] = t
		outs = append(outs, output{o.name, o.value, o.value})
	}

	const sched = "THROTTLER_SCHEDULE_SUBJECT"
	schedOK := false
	if err := subject.Validate(cfg.ScheduleSubject, false); err != nil {
		add(sched, "must be a subject prefix without wildcards, such as sched: "+err.Error())
	} else if strings.ContainsAny(cfg.ScheduleSubject, "{}") {
		add(sched, "must be a subject prefix without wildcards, such as sched: placeholders are not allowed")
	} else {
		schedOK = true
		// PREFIX.TENANT.SEQ: both tail tokens may be anything.
		p := subject.Placeholder
		outs = append(outs, output{sched, cfg.ScheduleSubject + ".TENANT.SEQ", cfg.ScheduleSubject + "." + p + "." + p})
	}

	for _, o := range outs {
		for _, pattern := range subjects {
			if subject.Overlap(pattern, o.template) {
				add(o.name, fmt.Sprintf("%q is captured by %q in THROTTLER_SUBJECTS, so the worker would consume its own output; choose subjects that do not overlap",
					o.subject, pattern))
			}
		}
	}
	// Moved jobs live under SCHEDULE_SUBJECT.>, which the jobs stream binds
	// and the worker reads bundles from: no other output may land there.
	if cfg.Defer == config.DeferNak || !schedOK {
		return forward, dlq
	}
	under := subject.Schedules(cfg.ScheduleSubject).All()
	for _, o := range outs {
		if o.name != sched && subject.Overlap(under, o.template) {
			add(o.name, fmt.Sprintf("%q lies under %s %q, where moved jobs are kept; choose subjects outside %s.>",
				o.subject, sched, cfg.ScheduleSubject, cfg.ScheduleSubject))
		}
	}
	return forward, dlq
}

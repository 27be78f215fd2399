package app

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/throttler/throttler/subject"
	"github.com/throttler/throttler/tenant"
	"github.com/throttler/throttler/throttle"
)

// problems splits an error returned by LoadSettingsFrom into its lines.
func problems(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		return []string{err.Error()}
	}
	var out []string
	for _, e := range joined.Unwrap() {
		out = append(out, e.Error())
	}
	return out
}

// mustSettle loads vars and fails the test on any problem.
func mustSettle(t *testing.T, vars map[string]string) *Settings {
	t.Helper()
	s, err := LoadSettingsFrom(vars)
	if err != nil {
		t.Fatalf("LoadSettingsFrom(%v): unexpected problems:\n%v", vars, err)
	}
	return s
}

func TestSettingsDefaults(t *testing.T) {
	t.Parallel()
	s := mustSettle(t, nil)
	want := throttle.Rules{Default: throttle.Enforce(throttle.PerSecond(100, 100)), Tenants: map[string]throttle.Policy{}}
	if !reflect.DeepEqual(s.Rules, want) {
		t.Errorf("Rules = %+v, want %+v", s.Rules, want)
	}
	if s.TenantFrom != tenant.FromSubject(2) {
		t.Errorf("TenantFrom = %+v, want subject token 2", s.TenantFrom)
	}
	if s.Forward != "done.{tenant}" || s.DLQ != "dlq.{tenant}" || s.Schedules != "sched" {
		t.Errorf("Forward %q, DLQ %q, Schedules %q", s.Forward, s.DLQ, s.Schedules)
	}
}

func TestSettingsValid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		vars  map[string]string
		check func(t *testing.T, s *Settings)
	}{
		{
			name: "header tenant",
			vars: map[string]string{"THROTTLER_TENANT_FROM": "header:X-Tenant"},
			check: func(t *testing.T, s *Settings) {
				if s.TenantFrom != tenant.FromHeader("X-Tenant") || s.TenantFrom.String() != "header:X-Tenant" {
					t.Fatalf("TenantFrom = %+v", s.TenantFrom)
				}
			},
		},
		{
			name: "subject token beyond > is fine",
			vars: map[string]string{"THROTTLER_SUBJECTS": "jobs.>", "THROTTLER_TENANT_FROM": "subject:7"},
		},
		{
			name: "default burst applies",
			vars: map[string]string{"THROTTLER_DEFAULT_LIMIT": "10/s+1000/d:5000", "THROTTLER_DEFAULT_BURST": "20"},
			check: func(t *testing.T, s *Settings) {
				want := throttle.Enforce(throttle.PerSecond(10, 20), throttle.PerDay(1000, 5000))
				if !reflect.DeepEqual(s.Rules.Default, want) {
					t.Fatalf("Default = %v, want %v", s.Rules.Default, want)
				}
			},
		},
		{
			name: "tenant limits",
			vars: map[string]string{"THROTTLER_TENANT_LIMITS": "acme=50/s:100+10000/d, globex=5/m,big_co-2=1/h"},
			check: func(t *testing.T, s *Settings) {
				want := map[string]throttle.Policy{
					"acme":     throttle.Enforce(throttle.PerSecond(50, 100), throttle.PerDay(10000, 10000)),
					"globex":   throttle.Enforce(throttle.PerMinute(5, 5)),
					"big_co-2": throttle.Enforce(throttle.PerHour(1, 1)),
				}
				if !reflect.DeepEqual(s.Rules.Tenants, want) {
					t.Fatalf("Tenants = %v, want %v", s.Rules.Tenants, want)
				}
				if got := s.Rules.Policy("other"); !reflect.DeepEqual(got, s.Rules.Default) {
					t.Fatalf("Policy(other) = %v, want default", got)
				}
			},
		},
		{
			name: "one tenant in shadow mode",
			vars: map[string]string{"THROTTLER_TENANT_LIMITS": "acme=5/s+shadow,globex=5/s"},
			check: func(t *testing.T, s *Settings) {
				if !s.Rules.Policy("acme").Shadow || s.Rules.Policy("globex").Shadow || s.Rules.Default.Shadow {
					t.Fatalf("Rules = %+v, want acme alone in shadow mode", s.Rules)
				}
			},
		},
		{
			name: "every tenant in shadow mode",
			vars: map[string]string{"THROTTLER_SHADOW": "true", "THROTTLER_TENANT_LIMITS": "acme=5/s"},
			check: func(t *testing.T, s *Settings) {
				if !s.Rules.Policy("acme").Shadow || !s.Rules.Default.Shadow {
					t.Fatalf("Rules = %+v, want every policy in shadow mode", s.Rules)
				}
			},
		},
		{
			name: "outputs beside a narrow input",
			vars: map[string]string{"THROTTLER_SUBJECTS": "jobs.acme.*", "THROTTLER_FORWARD_SUBJECT": "jobs.x-{tenant}.done"},
			check: func(t *testing.T, s *Settings) {
				if s.Forward != subject.Template("jobs.x-{tenant}.done") {
					t.Fatalf("Forward = %q", s.Forward)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := mustSettle(t, tt.vars)
			if tt.check != nil {
				tt.check(t, s)
			}
		})
	}
}

// TestSettingsInvalidValues covers the variables read with the rules of
// packages throttle, tenant and subject; package config's tests cover the
// others. Each bad value gives exactly one problem, naming its variable.
func TestSettingsInvalidValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		val  string
		want string // also in the message, besides the variable's name
	}{
		{"THROTTLER_SUBJECTS", "jobs..x", "empty token"},
		{"THROTTLER_SUBJECTS", "jobs.>.x", "last token"},
		{"THROTTLER_SUBJECTS", "jobs.a*", "whole tokens"},
		{"THROTTLER_SUBJECTS", "$JS.API.>", "NATS keeps for itself"},
		{"THROTTLER_SUBJECTS", "$SYS.*.x", "$SYS.>"},
		{"THROTTLER_SUBJECTS", "_THROTTLER.*.x", "held tenants"},
		{"THROTTLER_TENANT_FROM", "subject:3", `"jobs.*" in THROTTLER_SUBJECTS has only 2 tokens`},
		{"THROTTLER_DEFAULT_LIMIT", "100", "RATE/UNIT"},
		{"THROTTLER_DEFAULT_LIMIT", " ", "such as 100/s"},
		{"THROTTLER_DEFAULT_LIMIT", "0/s", "rate"},
		{"THROTTLER_TENANT_LIMITS", "ac.me=5/s", "letters, digits, _ or -"},
		{"THROTTLER_TENANT_LIMITS", strings.Repeat("a", 129) + "=5/s", "1 to 128 letters"},
		{"THROTTLER_TENANT_LIMITS", "acme=5/x", "unit"},
		{"THROTTLER_TENANT_LIMITS", "acme=5/s+running:2", "needs THROTTLER_HANDLER=http"},
		{"THROTTLER_TENANT_LIMITS", "acme=running:0", "running:N"},
		{"THROTTLER_DEFAULT_LIMIT", "100/s+running:10", "needs THROTTLER_HANDLER=http"},
		{"THROTTLER_FORWARD_SUBJECT", "done.{tenant}.{id}", "unknown placeholder {id}"},
		{"THROTTLER_FORWARD_SUBJECT", "done.{tenant", "without }"},
		{"THROTTLER_FORWARD_SUBJECT", "done.tenant}", "without {"},
		{"THROTTLER_FORWARD_SUBJECT", "done.*", "wildcard"},
		{"THROTTLER_FORWARD_SUBJECT", "done..{tenant}", "empty token"},
		{"THROTTLER_FORWARD_SUBJECT", "done {tenant}", "white space"},
		{"THROTTLER_FORWARD_SUBJECT", "jobs.{tenant}", "THROTTLER_SUBJECTS"},
		{"THROTTLER_DLQ_SUBJECT", "dlq.>", "wildcard"},
		{"THROTTLER_DLQ_SUBJECT", "jobs.dlq.{tenant}", "captured"},
		{"THROTTLER_SCHEDULE_SUBJECT", "sched.*", "wildcard"},
		{"THROTTLER_SCHEDULE_SUBJECT", "sched.{tenant}", "placeholders"},
		{"THROTTLER_SCHEDULE_SUBJECT", "jobs", "captured"},
	}
	for _, tt := range tests {
		t.Run(tt.name+"="+tt.val, func(t *testing.T) {
			t.Parallel()
			vars := map[string]string{tt.name: tt.val}
			if tt.name == "THROTTLER_TENANT_FROM" || tt.name == "THROTTLER_SUBJECTS" {
				vars["THROTTLER_SUBJECTS"] = cmp(vars["THROTTLER_SUBJECTS"], "jobs.*")
			}
			s, err := LoadSettingsFrom(vars)
			if err == nil {
				t.Fatalf("LoadSettingsFrom(%v) = %+v, want an error", vars, s)
			}
			if s != nil {
				t.Fatalf("LoadSettingsFrom returned Settings along with an error")
			}
			got := problems(t, err)
			if len(got) != 1 {
				t.Fatalf("want exactly one problem, got %d:\n%s", len(got), strings.Join(got, "\n"))
			}
			if !strings.HasPrefix(got[0], tt.name+": ") {
				t.Errorf("problem does not start with %q: %s", tt.name+": ", got[0])
			}
			if !strings.Contains(got[0], tt.want) {
				t.Errorf("problem does not mention %q: %s", tt.want, got[0])
			}
		})
	}
}

// cmp returns a unless it is empty, else b.
func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestProblemsOfBothStagesAtOnce: what package config finds and what is
// found with the packages' rules are reported together.
func TestProblemsOfBothStagesAtOnce(t *testing.T) {
	t.Parallel()
	_, err := LoadSettingsFrom(map[string]string{
		"THROTTLER_CONCURRENCY":   "abc",
		"THROTTLER_DEFAULT_LIMIT": "100/fortnight",
		"THROTTLER_TENANT_LIMITS": "acme=5,globex=0/s",
		"THROTTLER_DEFAULT_BURST": "-1",
	})
	var names []string
	for _, p := range problems(t, err) {
		name, _, _ := strings.Cut(p, ": ")
		names = append(names, name)
	}
	slices.Sort(names)
	want := []string{"THROTTLER_CONCURRENCY", "THROTTLER_DEFAULT_BURST", "THROTTLER_DEFAULT_LIMIT", "THROTTLER_TENANT_LIMITS", "THROTTLER_TENANT_LIMITS"}
	if !slices.Equal(names, want) {
		t.Fatalf("problems:\n%v\nwant one each for %q", err, want)
	}
	for _, s := range []string{`"abc"`, "fortnight", `"acme"`, `"globex"`} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error does not mention %s:\n%v", s, err)
		}
	}
}

func TestOverlap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		subjects string
		forward  string
		overlaps bool
	}{
		{"jobs.>", "done.{tenant}", false},
		{"jobs.>", "jobs.{tenant}", true},
		{"jobs.>", "jobs", false},
		{"jobs.*", "jobs.{tenant}.done", false},
		{"jobs.*.*", "jobs.{tenant}.done", true},
		{"*.*", "done.{tenant}", true},
		{">", "done.{tenant}", true},
		{"jobs.acme", "jobs.{tenant}", true},
		{"jobs.acme", "jobs.x-{tenant}", false},
		{"jobs.x-acme", "jobs.x-{tenant}", true},
		{"jobs.x-", "jobs.x-{tenant}", false},
		{"jobs.ab", "jobs.{tenant}b", true},
		{"jobs.b", "jobs.{tenant}b", false},
		{"jobs.a-b-c", "jobs.{tenant}-{tenant}", true},
		{"jobs.a-", "jobs.{tenant}-{tenant}", false},
		{"done.acme", "done.{tenant}", true},
		{"a.>,done.*", "done.{tenant}", true},
	}
	for _, tt := range tests {
		t.Run(tt.subjects+" vs "+tt.forward, func(t *testing.T) {
			t.Parallel()
			_, err := LoadSettingsFrom(map[string]string{
				"THROTTLER_SUBJECTS":        tt.subjects,
				"THROTTLER_FORWARD_SUBJECT": tt.forward,
				"THROTTLER_TENANT_FROM":     "header:Tenant",
			})
			var got []string // the other outputs may overlap too; look at the forward subject only
			for _, p := range problems(t, err) {
				if strings.HasPrefix(p, "THROTTLER_FORWARD_SUBJECT: ") {
					got = append(got, p)
				}
			}
			if tt.overlaps != (len(got) > 0) {
				t.Fatalf("overlap=%v, problems:\n%v", tt.overlaps, err)
			}
			for _, p := range got {
				if !strings.Contains(p, "THROTTLER_SUBJECTS") || !strings.Contains(p, "captured") {
					t.Errorf("problem should name both variables: %s", p)
				}
			}
		})
	}
}

func TestScheduleOverlap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		subjects string
		prefix   string
		overlaps bool
	}{
		{"jobs.>", "sched", false},
		{"jobs.>", "jobs.sched", true},
		{"*.*.*", "sched", true},
		{"*.*", "sched", false},
		{"sched.acme.*", "sched", true},
		{"sched.acme", "sched", false},
	}
	for _, tt := range tests {
		t.Run(tt.subjects+" vs "+tt.prefix, func(t *testing.T) {
			t.Parallel()
			_, err := LoadSettingsFrom(map[string]string{
				"THROTTLER_SUBJECTS":         tt.subjects,
				"THROTTLER_SCHEDULE_SUBJECT": tt.prefix,
				"THROTTLER_TENANT_FROM":      "header:Tenant",
				"THROTTLER_FORWARD_SUBJECT":  "out.done.{tenant}.x.y",
				"THROTTLER_DLQ_SUBJECT":      "out.dlq.{tenant}.x.y",
			})
			var got []string // the subjects may be reserved too; look at the schedule prefix only
			for _, p := range problems(t, err) {
				if !strings.HasPrefix(p, "THROTTLER_SUBJECTS: ") {
					got = append(got, p)
				}
			}
			if tt.overlaps != (len(got) > 0) {
				t.Fatalf("overlap=%v, problems:\n%s", tt.overlaps, strings.Join(got, "\n"))
			}
			for _, p := range got {
				if !strings.HasPrefix(p, "THROTTLER_SCHEDULE_SUBJECT: ") || !strings.Contains(p, "THROTTLER_SUBJECTS") {
					t.Errorf("problem should name both variables: %s", p)
				}
			}
		})
	}
}

// TestOutputsOutsideSchedules checks that forwarded and dead-lettered jobs
// may not be published under the schedule prefix, where the jobs stream
// would keep them and the worker would read them as bundles; with NAK-only
// deferral the prefix is unused and nothing is refused.
func TestOutputsOutsideSchedules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		defer_, forward, dlq string
		want                 []string // variables named, in order
	}{
		{"auto", "done.{tenant}", "dlq.{tenant}", nil},
		{"auto", "sched.u.{tenant}.x", "dlq.{tenant}", []string{"THROTTLER_FORWARD_SUBJECT"}},
		{"schedule", "done.{tenant}", "sched.{tenant}", []string{"THROTTLER_DLQ_SUBJECT"}},
		{"auto", "{tenant}.done", "dlq.{tenant}", []string{"THROTTLER_FORWARD_SUBJECT"}},
		{"nak", "sched.u.{tenant}.x", "sched.{tenant}", nil},
	}
	for _, tt := range tests {
		t.Run(tt.defer_+" "+tt.forward+" "+tt.dlq, func(t *testing.T) {
			t.Parallel()
			_, err := LoadSettingsFrom(map[string]string{
				"THROTTLER_DEFER":            tt.defer_,
				"THROTTLER_SCHEDULE_SUBJECT": "sched",
				"THROTTLER_FORWARD_SUBJECT":  tt.forward,
				"THROTTLER_DLQ_SUBJECT":      tt.dlq,
			})
			var named []string
			for _, p := range problems(t, err) {
				if strings.Contains(p, "where moved jobs are kept") {
					named = append(named, strings.SplitN(p, ":", 2)[0])
				}
			}
			if !slices.Equal(named, tt.want) {
				t.Fatalf("problems name %v, want %v (all: %v)", named, tt.want, problems(t, err))
			}
		})
	}
}

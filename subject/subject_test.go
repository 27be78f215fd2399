package subject

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		s       string
		wild    bool
		wantErr string
	}{
		{s: "jobs.acme", wild: false},
		{s: "jobs.>", wild: true},
		{s: "jobs.*.email", wild: true},
		{s: "", wantErr: "empty subject"},
		{s: "jobs..x", wild: true, wantErr: "empty token"},
		{s: "jobs.", wild: true, wantErr: "empty token"},
		{s: "jobs a", wild: true, wantErr: "white space"},
		{s: "jobs.\x01", wild: true, wantErr: "control"},
		{s: "jobs.>", wild: false, wantErr: "wildcard"},
		{s: "jobs.a*", wild: true, wantErr: "whole tokens"},
		{s: "jobs.>.x", wild: true, wantErr: "last token"},
	} {
		err := Validate(tc.s, tc.wild)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("Validate(%q, %v): %v", tc.s, tc.wild, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("Validate(%q, %v) = %v, want an error containing %q", tc.s, tc.wild, err, tc.wantErr)
		}
	}
}

func TestCovers(t *testing.T) {
	for _, tc := range []struct {
		pattern, subj string
		want          bool
	}{
		{"jobs.>", "jobs.>", true},
		{"jobs.>", "jobs.*.email", true},
		{"jobs.>", "jobs.acme", true},
		{"jobs.>", "jobs", false},
		{"jobs.*", "jobs.acme", true},
		{"jobs.*", "jobs.*", true},
		{"jobs.*", "jobs.>", false},
		{"jobs.*", "jobs.a.b", false},
		{"jobs.acme", "jobs.*", false},
		{"jobs.acme", "jobs.acme", true},
		{"jobs.acme", "jobs.acme.x", false},
		{"*.>", "jobs.a.b", true},
		{">", "anything.at.all", true},
		{"orders.>", "jobs.>", false},
	} {
		if got := Covers(tc.pattern, tc.subj); got != tc.want {
			t.Errorf("Covers(%q, %q) = %v, want %v", tc.pattern, tc.subj, got, tc.want)
		}
	}
}

func TestOverlap(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"jobs.>", "jobs.acme", true},
		{"jobs.>", "jobs", false},
		{"jobs.*", "jobs.acme", true},
		{"jobs.*", "jobs.a.b", false},
		{"jobs.*.email", "jobs.acme.*", true},
		{"jobs.*.email", "jobs.acme.sms", false},
		{"orders.>", "jobs.>", false},
		{">", "jobs.acme", true},
		{"jobs.acme", "jobs.acme", true},
		{"jobs.acme", "jobs.acme.x", false},
		// Templates: {tenant} is any non-empty text without a dot.
		{"jobs.>", "jobs.{tenant}", true},
		{"jobs.*", "jobs.done.{tenant}", false},
		{"jobs.*.*", "jobs.done.{tenant}", true},
		{"done.*", "done.{tenant}", true},
		{"jobs.>", "done.{tenant}", false},
		{"done.x-acme", "done.x-{tenant}", true},
		{"done.x-", "done.x-{tenant}", false},
		{"done.acme", "done.{tenant}-x", false},
		{"done.a-x", "done.{tenant}-x", true},
		{"done.ab", "done.{tenant}{tenant}", true},
		{"done.a", "done.{tenant}{tenant}", false},
		{"sched.>", "sched.{tenant}.{tenant}", true},
		{"jobs.{tenant}", "jobs.x{tenant}", true},
	} {
		for _, ab := range [][2]string{{tc.a, tc.b}, {tc.b, tc.a}} {
			if got := Overlap(ab[0], ab[1]); got != tc.want {
				t.Errorf("Overlap(%q, %q) = %v, want %v", ab[0], ab[1], got, tc.want)
			}
		}
	}
}

func TestHasToken(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		n       int
		want    bool
	}{
		{"jobs.*", 2, true},
		{"jobs.*", 3, false},
		{"jobs.>", 9, true},
		{"jobs", 1, true},
	} {
		if got := HasToken(tc.pattern, tc.n); got != tc.want {
			t.Errorf("HasToken(%q, %d) = %v, want %v", tc.pattern, tc.n, got, tc.want)
		}
	}
}

func TestTemplate(t *testing.T) {
	for _, tc := range []struct{ in, tenant, render, pattern string }{
		{"done.{tenant}", "acme", "done.acme", "done.*"},
		{"done.{tenant}.x-{tenant}", "acme", "done.acme.x-acme", "done.*.x-*"},
		{"done.fixed", "acme", "done.fixed", "done.fixed"},
		{"dlq.{tenant}", "_invalid", "dlq._invalid", "dlq.*"},
	} {
		tpl, err := ParseTemplate(tc.in)
		if err != nil {
			t.Fatalf("ParseTemplate(%q): %v", tc.in, err)
		}
		if got := tpl.Render(tc.tenant); got != tc.render {
			t.Errorf("Render(%q, %q) = %q, want %q", tc.in, tc.tenant, got, tc.render)
		}
		if got := tpl.Pattern(); got != tc.pattern {
			t.Errorf("Pattern(%q) = %q, want %q", tc.in, got, tc.pattern)
		}
	}
	for _, bad := range []string{"", "done.{tenant", "done.tenant}", "done.{other}", "done.>", "done..{tenant}", "done {tenant}"} {
		if _, err := ParseTemplate(bad); err == nil {
			t.Errorf("ParseTemplate(%q) accepted", bad)
		}
	}
}

func TestSchedules(t *testing.T) {
	s := Schedules("sched")
	for _, tc := range []struct {
		subject string
		kind    Kind
		tenant  string
	}{
		{s.Copy("acme", 42), CopyKind, "acme"},
		{s.Bundle("acme", "JOBS-1-ab"), BundleKind, "acme"},
		{s.Unpack("acme", "JOBS-1-ab"), UnpackKind, "acme"},
		{s.Fast("acme", 42), FastKind, "acme"},
		{"sched.x.acme.1", Other, ""},
		{"other.acme.1", Other, ""},
		{"sched.acme", Other, ""},
	} {
		kind, ten := s.Parse(tc.subject)
		if kind != tc.kind || ten != tc.tenant {
			t.Errorf("Parse(%q) = %v, %q; want %v, %q", tc.subject, kind, ten, tc.kind, tc.tenant)
		}
	}
	for _, tc := range [][2]string{
		{s.Copy("acme", 42), s.All()},
		{s.Unpack("acme", "id"), s.Unpacks()},
		{s.Fast("acme", 42), s.Fasts()},
	} {
		if !Covers(tc[1], tc[0]) {
			t.Errorf("%q does not cover %q", tc[1], tc[0])
		}
	}
	if Covers(s.Unpacks(), s.Copy("u", 1)) || Covers(s.Fasts(), s.Copy("f", 1)) {
		t.Error("a copy's subject is matched by the pattern of another kind")
	}
}

package consumer

import "testing"

func TestSubjectCovers(t *testing.T) {
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
		if got := subjectCovers(tc.pattern, tc.subj); got != tc.want {
			t.Errorf("subjectCovers(%q, %q) = %v, want %v", tc.pattern, tc.subj, got, tc.want)
		}
	}
}

func TestSubjectsOverlap(t *testing.T) {
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
	} {
		for _, ab := range [][2]string{{tc.a, tc.b}, {tc.b, tc.a}} {
			if got := SubjectsOverlap(ab[0], ab[1]); got != tc.want {
				t.Errorf("SubjectsOverlap(%q, %q) = %v, want %v", ab[0], ab[1], got, tc.want)
			}
		}
	}
}

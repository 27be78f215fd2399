package config

import (
	"reflect"
	"strings"
	"testing"
)

// The variables of the limits above the tenant load as given, the group's
// source and limits split as the tenant's are; a spec is not read here.
func TestLevelsLoad(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, map[string]string{
		"THROTTLER_GLOBAL_LIMIT":        "500/s",
		"THROTTLER_GROUP_FROM":          "header:X-Org",
		"THROTTLER_GROUP_LIMITS":        "org-1=1000/s, org-2=200/s:400",
		"THROTTLER_DEFAULT_GROUP_LIMIT": "50/s",
		"THROTTLER_GROUP_REQUIRED":      "true",
	})
	want := map[string]string{"org-1": "1000/s", "org-2": "200/s:400"}
	if c.GlobalLimit != "500/s" || c.DefaultGroupLimit != "50/s" || !c.GroupRequired ||
		c.GroupFromHeader != "X-Org" || c.GroupFromToken != 0 || !reflect.DeepEqual(c.GroupLimitSpecs, want) {
		t.Fatalf("loaded %+v; want the levels' variables as given, groups %v", c, want)
	}
	c = mustLoad(t, map[string]string{"THROTTLER_GROUP_FROM": "subject:3"})
	if c.GroupFromToken != 3 || c.GroupFromHeader != "" || len(c.GroupLimitSpecs) != 0 {
		t.Fatalf("GROUP_FROM subject:3 loaded token %d, header %q, groups %v", c.GroupFromToken, c.GroupFromHeader, c.GroupLimitSpecs)
	}
}

// A bad value of a level's variable is one problem that names it; the
// group's limits and GROUP_REQUIRED without GROUP_FROM are refused, since
// without it no job has a group they could apply to.
func TestLevelsProblems(t *testing.T) {
	t.Parallel()
	withFrom := func(name, val string) map[string]string {
		return map[string]string{"THROTTLER_GROUP_FROM": "header:Org", name: val}
	}
	tests := []struct {
		name string // the variable with the problem
		vars map[string]string
		want string
	}{
		{"THROTTLER_GROUP_FROM", map[string]string{"THROTTLER_GROUP_FROM": "subject:0"}, "from 1"},
		{"THROTTLER_GROUP_FROM", map[string]string{"THROTTLER_GROUP_FROM": "header:a b"}, "header name"},
		{"THROTTLER_GROUP_FROM", map[string]string{"THROTTLER_GROUP_FROM": "org"}, "subject:N"},
		{"THROTTLER_GROUP_LIMITS", withFrom("THROTTLER_GROUP_LIMITS", "org-1"), "GROUP=LIMITS"},
		{"THROTTLER_GROUP_LIMITS", withFrom("THROTTLER_GROUP_LIMITS", "org-1=5/s,"), "empty entry"},
		{"THROTTLER_GROUP_LIMITS", withFrom("THROTTLER_GROUP_LIMITS", "org-1=5/s,org-1=6/s"), `group "org-1" given twice`},
		{"THROTTLER_GROUP_REQUIRED", withFrom("THROTTLER_GROUP_REQUIRED", "maybe"), "true or false"},
		{"THROTTLER_GROUP_LIMITS", map[string]string{"THROTTLER_GROUP_LIMITS": "org-1=5/s"}, "needs THROTTLER_GROUP_FROM"},
		{"THROTTLER_DEFAULT_GROUP_LIMIT", map[string]string{"THROTTLER_DEFAULT_GROUP_LIMIT": "5/s"}, "needs THROTTLER_GROUP_FROM"},
		{"THROTTLER_GROUP_REQUIRED", map[string]string{"THROTTLER_GROUP_REQUIRED": "true"}, "needs THROTTLER_GROUP_FROM"},
	}
	for _, tt := range tests {
		t.Run(tt.name+"/"+tt.want, func(t *testing.T) {
			t.Parallel()
			_, err := LoadFrom(tt.vars)
			got := problems(t, err)
			if len(got) != 1 || !strings.HasPrefix(got[0], tt.name+": ") || !strings.Contains(got[0], tt.want) {
				t.Fatalf("LoadFrom(%v) problems %q; want one of %s mentioning %q", tt.vars, got, tt.name, tt.want)
			}
		})
	}
	// Set to false, GROUP_REQUIRED asks nothing: it is its default.
	mustLoad(t, map[string]string{"THROTTLER_GROUP_REQUIRED": "false"})
}

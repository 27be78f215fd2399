package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/limits"
)

// TestLimitsSetRefusesWhatTheWorkersIgnore sets a running cap in an
// environment whose workers forward (THROTTLER_HANDLER unset): the workers
// would ignore it and keep the old limit, so the command exits 2 and
// writes nothing; with THROTTLER_HANDLER=http it is written.
func TestLimitsSetRefusesWhatTheWorkersIgnore(t *testing.T) {
	setup(t)
	cli(t, "limits", "set", "globex", "5/m").want(t, "set 5/m", exitOK, []string{"globex: 5/m:5 (revision 1)"}, nil)
	cli(t, "limits", "set", "globex", "running:2").want(t, "set running:2 on a forwarding fleet", exitConfig, nil,
		[]string{"running:2: the workers would ignore it", "THROTTLER_HANDLER=http", "nothing written"})
	cli(t, "limits", "history", "globex").want(t, "history after the refusal", exitOK, []string{"1  "}, nil)
	if r := cli(t, "limits", "history", "globex"); contains(r.stdout, "running:2") {
		t.Fatalf("the refused value was written:\n%s", r.stdout)
	}
	t.Setenv("THROTTLER_HANDLER", "http")
	t.Setenv("THROTTLER_HTTP_URL", "http://127.0.0.1:1/jobs")
	cli(t, "limits", "set", "globex", "running:2").want(t, "set running:2 on an http fleet", exitOK, []string{"globex: running:2 (revision 2)"}, nil)
}

// TestLimitsMarkAStoredValueTheWorkersIgnore stores a running cap behind
// the command's back (as `nats kv put` would) on a fleet that forwards:
// get, list and history mark it ignored and say why, and get shows the
// latest good value, the one the workers apply.
func TestLimitsMarkAStoredValueTheWorkersIgnore(t *testing.T) {
	s := setup(t)
	cli(t, "limits", "set", "globex", "5/m").want(t, "set 5/m", exitOK, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(s.nats.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := limits.OpenBucket(ctx, js, "throttler_limits", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.PutString(ctx, "globex", "running:2"); err != nil {
		t.Fatal(err)
	}
	cli(t, "limits", "get", "globex").want(t, "get", exitOK,
		[]string{"globex: 5/m:5 from bucket (revision 1", `globex's value "running:2" (revision 2) is ignored by the workers: running:N needs THROTTLER_HANDLER=http`}, nil)
	cli(t, "limits", "list").want(t, "list", exitOK,
		[]string{"running:2", "bucket (revision 2), IGNORED by the workers: running:N needs", "they apply 5/m:5 from bucket (revision 1"}, nil)
	cli(t, "limits", "history", "globex").want(t, "history", exitOK, []string{"running:2 (ignored by the workers: running:N needs"}, nil)
}

// TestLimitsRmOfAnAbsentKey removes a key twice: the second time says there
// is nothing to remove, exits 0 and writes no revision.
func TestLimitsRmOfAnAbsentKey(t *testing.T) {
	setup(t)
	cli(t, "limits", "rm", "acme").want(t, "rm before any bucket", exitOK, []string{"acme: no limits of its own in the bucket; nothing removed"}, nil)
	cli(t, "limits", "history", "acme").want(t, "history before any bucket", exitOK, []string{"acme: no values in the bucket"}, nil)
	cli(t, "limits", "set", "acme", "7/s").want(t, "set", exitOK, nil, nil)
	cli(t, "limits", "rm", "acme").want(t, "first rm", exitOK, []string{`acme: removed from the bucket (was "7/s", revision 1)`, "acme: 100/s:100 from THROTTLER_DEFAULT_LIMIT"}, nil)
	cli(t, "limits", "rm", "acme").want(t, "second rm", exitOK, []string{"acme: no limits of its own in the bucket; nothing removed", "acme: 100/s:100 from THROTTLER_DEFAULT_LIMIT"}, nil)
	r := cli(t, "limits", "history", "acme")
	if contains(r.stdout, "3  ") || !contains(r.stdout, "2  ") {
		t.Fatalf("history after two rm: want revisions 1 and 2 only\n%s", r.stdout)
	}
}

// TestLimitsSetDefaultSaysTheWorkersBringBack: a changed _default says
// that the workers bring back the moved jobs of the tenants under it (the
// command cannot tell which they are); writing it again changes nothing
// and says nothing of it.
func TestLimitsSetDefaultSaysTheWorkersBringBack(t *testing.T) {
	setup(t)
	const note = "the workers bring back the jobs they moved of the tenants under the default"
	cli(t, "limits", "set", "_default", "7/s").want(t, "set _default", exitOK, []string{"_default: 7/s:7 (revision 1)", note}, nil)
	if r := cli(t, "limits", "set", "_default", "7/s"); contains(r.stdout, note) {
		t.Fatalf("the same _default again says the workers bring jobs back:\n%s", r.stdout)
	}
	cli(t, "limits", "rm", "_default").want(t, "rm _default", exitOK, []string{note}, nil)
}

// TestLimitsFromAnEnvironmentWithoutLimits checks that a limit read from a
// shell that sets no limit variables says so (the workers' may set some),
// and that one that sets them does not.
func TestLimitsFromAnEnvironmentWithoutLimits(t *testing.T) {
	setup(t)
	cli(t, "limits", "get", "acme").want(t, "get in a bare shell", exitOK,
		[]string{"acme: 100/s:100 from THROTTLER_DEFAULT_LIMIT", "sets neither THROTTLER_DEFAULT_LIMIT nor THROTTLER_TENANT_LIMITS"}, nil)
	t.Setenv("THROTTLER_TENANT_LIMITS", "acme=2/s")
	r := cli(t, "limits", "get", "acme")
	r.want(t, "get with the workers' limits", exitOK, []string{"acme: 2/s:2 from THROTTLER_TENANT_LIMITS"}, nil)
	if contains(r.stdout, "sets neither") {
		t.Fatalf("a shell with limits is told it has none:\n%s", r.stdout)
	}
}

// TestLimitsOfLevels sets, reads, lists and removes the limits above the
// tenants: _global, and a group's with --group. A tenant's term in their
// spec, or a bad group name, exits 2 before anything is written, before
// any connection even; list shows them in a table of their own.
func TestLimitsOfLevels(t *testing.T) {
	setup(t)
	cli(t, "limits", "set", "_global", "500/s").want(t, "set _global", exitOK, []string{"_global: 500/s:500 (revision 1)"}, nil)
	cli(t, "limits", "set", "--group", "org-1", "100/s").want(t, "set --group", exitOK, []string{"group.org-1: 100/s:100 (revision 2)"}, nil)
	cli(t, "limits", "set", "acme", "5/s+weight:3").want(t, "a tenant's weight", exitOK, []string{"acme: 5/s:5+weight:3 (revision 3)"}, nil)

	t.Run("refused before connecting", func(t *testing.T) {
		t.Setenv("NATS_URL", "nats://127.0.0.1:1") // nothing listens there: a connection would fail with exit 1
		cli(t, "limits", "set", "_global", "500/s+running:2").want(t, "a running cap on _global", exitConfig, nil,
			[]string{"the workers would ignore it", "a tenant's terms", "nothing written"})
		cli(t, "limits", "set", "--group", "org-1", "5/s+weight:2").want(t, "a weight on a group", exitConfig, nil, []string{"weight:N"})
		cli(t, "limits", "set", "--group", "org.1", "5/s").want(t, "a bad group", exitConfig, nil, []string{"malformed group"})
		cli(t, "limits", "get", "group.a b").want(t, "a bad group key", exitConfig, nil, []string{"names no group"})
	})

	cli(t, "limits", "get", "_global").want(t, "get _global", exitOK, []string{"_global: 500/s:500 from bucket (revision 1"}, nil)
	cli(t, "limits", "get", "--group", "org-2").want(t, "get a group without a limit", exitOK,
		[]string{"group.org-2: no limit from THROTTLER_DEFAULT_GROUP_LIMIT", "sets none of THROTTLER_GLOBAL_LIMIT"}, nil)
	cli(t, "limits", "history", "--group", "org-1").want(t, "history --group", exitOK, []string{"2  ", "put        100/s"}, nil)

	r := cli(t, "limits", "list")
	r.want(t, "list", exitOK, []string{"TENANT", "LEVEL"}, nil)
	tenants, levels, _ := strings.Cut(r.stdout, "\n\n")
	if contains(tenants, "_global") || contains(tenants, "group.") || !hasRow(tenants, "acme", "5/s:5+weight:3") ||
		!hasRow(levels, "_global", "500/s:500") || !hasRow(levels, "group.org-1", "100/s:100") {
		t.Fatalf("list does not keep the levels apart from the tenants:\n%s", r.stdout)
	}
	r = cli(t, "limits", "list", "--group", "org")
	r.want(t, "list --group", exitOK, []string{"LEVEL", "group.org-1"}, nil)
	if contains(r.stdout, "TENANT") || contains(r.stdout, "_global") || contains(r.stdout, "acme") {
		t.Fatalf("list --group org lists more than the groups org*:\n%s", r.stdout)
	}

	cli(t, "limits", "rm", "--group", "org-1").want(t, "rm --group", exitOK,
		[]string{`group.org-1: removed from the bucket (was "100/s", revision 2)`, "group.org-1: no limit from THROTTLER_DEFAULT_GROUP_LIMIT"}, nil)
	t.Setenv("THROTTLER_GROUP_FROM", "header:Org")
	t.Setenv("THROTTLER_GROUP_LIMITS", "org-1=50/s")
	t.Setenv("THROTTLER_DEFAULT_GROUP_LIMIT", "10/s")
	r = cli(t, "limits", "get", "--group", "org-1")
	r.want(t, "get a group of the environment", exitOK, []string{"group.org-1: 50/s:50 from THROTTLER_GROUP_LIMITS"}, nil)
	if contains(r.stdout, "sets none") {
		t.Fatalf("a shell with group limits is told it has none:\n%s", r.stdout)
	}
	r = cli(t, "limits", "list", "--group")
	r.want(t, "list --group with the environment's", exitOK, nil, nil)
	if !hasRow(r.stdout, "group.*", "10/s:10", "THROTTLER_DEFAULT_GROUP_LIMIT") || !hasRow(r.stdout, "group.org-1", "50/s:50", "THROTTLER_GROUP_LIMITS") ||
		!hasRow(r.stdout, "_global", "500/s:500", "bucket") {
		t.Fatalf("list --group does not show the environment's group limits under the bucket's global one:\n%s", r.stdout)
	}
}

// hasRow reports whether a table printed by the command has a line whose
// first columns are cols.
func hasRow(table string, cols ...string) bool {
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) >= len(cols) && slices.Equal(f[:len(cols)], cols) {
			return true
		}
	}
	return false
}

// A wrong `limits` command line says what the command takes, before any
// connection.
func TestLimitsUsageSaysWhatIsMissing(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"limits", "set", "acme"}, `set takes a TENANT (or --group NAME) and a SPEC, got "acme"`},
		{[]string{"limits", "get", "--group"}, `get takes a TENANT (or --group NAME), got ""`},
		{[]string{"limits", "rm"}, `rm takes a TENANT (or --group NAME), got ""`},
		{[]string{"limits", "list", "a", "b"}, `list takes at most a PREFIX, got "a b"`},
		{[]string{"limits", "frob"}, `unknown command "frob"`},
	} {
		cli(t, tc.args...).want(t, strings.Join(tc.args, " "), exitConfig, nil, []string{tc.want, "usage: throttler limits set"})
	}
}

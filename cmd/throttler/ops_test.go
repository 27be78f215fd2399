package main

import (
	"bytes"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/throttler/throttler/internal/ops"
)

// TestOpsBadInput: the hands-on commands refuse bad input with status 2
// and a message naming what is wrong, before any connection.
func TestOpsBadInput(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"purge"}, "want one TENANT"},
		{[]string{"purge", "a b", "--yes"}, "TENANT"},
		{[]string{"purge", "acme", "--older-than", "soon"}, "want a duration"},
		{[]string{"purge", "acme", "--force"}, "flag provided but not defined"},
		{[]string{"dlq"}, "want list, show, replay or purge"},
		{[]string{"dlq", "requeue"}, "want list, show, replay or purge"},
		{[]string{"dlq", "show"}, "show"},
		{[]string{"dlq", "show", "x1"}, "ID \"x1\""},
		{[]string{"dlq", "show", "3", "--tenant", "acme"}, "flag provided but not defined"},
		{[]string{"dlq", "list", "--limit", "-1"}, "limit -1"},
		{[]string{"dlq", "list", "--since", "7x"}, "want a duration"},
		{[]string{"dlq", "list", "--tenant", "a/b"}, "tenant"},
		{[]string{"dlq", "list", "extra"}, "unexpected \"extra\""},
		{[]string{"dlq", "list", "--yes"}, "list takes no --yes (purge does)"},
		{[]string{"dlq", "replay", "--yes"}, "replay takes no --yes (purge does)"},
		{[]string{"dlq", "show", "1", "--dry-run"}, "show takes no --dry-run"},
	} {
		var out, errOut bytes.Buffer
		if status := run(c.args, &out, &errOut); status != exitConfig || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%v: status %d, %q; want %d naming %q", c.args, status, errOut.String(), exitConfig, c.want)
		}
	}
}

// TestOpsServerDown: a NATS that does not answer is a server's failure,
// status 1.
func TestOpsServerDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	t.Setenv("NATS_URL", "nats://127.0.0.1:"+strconv.Itoa(port))
	for _, args := range [][]string{{"purge", "acme"}, {"dlq", "list"}} {
		var out, errOut bytes.Buffer
		if status := run(args, &out, &errOut); status != exitFailed {
			t.Errorf("%v: status %d, %q; want %d", args, status, errOut.String(), exitFailed)
		}
	}
}

// TestOpsWithoutTheJobsStream: on a NATS server no worker has started on,
// purge and dlq replay say the jobs stream is missing and what to do,
// exit 1, and print nothing on stdout. Before, they printed JetStream's
// "API error: code=404 ... stream not found", and replay "replayed 0 dead
// letters" on stdout first.
func TestOpsWithoutTheJobsStream(t *testing.T) {
	setup(t)
	const said = "no stream JOBS on this server: start the worker first (it creates the stream JOBS for "
	for _, args := range [][]string{{"purge", "acme"}, {"purge", "acme", "--yes"}, {"dlq", "replay"}, {"dlq", "replay", "--json"}} {
		r := cli(t, append(args, "--quiet")...)
		r.want(t, strings.Join(args, " "), exitFailed, nil, []string{"throttler " + args[0] + ": ", said})
		if r.stdout != "" || contains(r.stderr, "API error") {
			t.Errorf("%v without the jobs stream: stdout %q, stderr %q", args, r.stdout, r.stderr)
		}
	}
}

// TestPurgeSaysTheSlotsStayCharged: a purge that removed jobs holding
// slots says how many, and that their slots stay charged, which a tenant
// under a low limit feels as its next jobs waiting; a dry run, a purge
// that removed nothing, or only uncharged jobs (paused ones), does not.
func TestPurgeSaysTheSlotsStayCharged(t *testing.T) {
	for _, tc := range []struct {
		r    ops.PurgeReport
		want bool
	}{
		{ops.PurgeReport{Tenant: "acme", Removed: 5, Moved: 5, Charged: 3}, true},
		{ops.PurgeReport{Tenant: "acme", Removed: 5, Moved: 5, Charged: 3, DryRun: true}, false},
		{ops.PurgeReport{Tenant: "acme", Removed: 5, Moved: 5}, false},
		{ops.PurgeReport{Tenant: "acme"}, false},
	} {
		var out strings.Builder
		printPurge(&out, tc.r)
		if got := strings.Contains(out.String(), "the slots 3 of the removed jobs held stay charged: acme's next jobs wait as if they had run (throttler inspect acme"); got != tc.want {
			t.Errorf("%+v printed:\n%s\nsaying the slots stay charged: %v, want %v", tc.r, out.String(), got, tc.want)
		}
	}
}

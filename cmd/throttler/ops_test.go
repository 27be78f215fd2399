package main

import (
	"bytes"
	"net"
	"strconv"
	"strings"
	"testing"
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
		{[]string{"dlq", "list", "--yes"}, "neither --dry-run nor --yes"},
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

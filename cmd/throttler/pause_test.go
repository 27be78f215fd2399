package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestPauseAndTopRefuseBadInput: bad arguments exit 2 with a message
// naming what is wrong, before any connection (none of these reach a
// server: NATS_URL points nowhere).
func TestPauseAndTopRefuseBadInput(t *testing.T) {
	t.Setenv("NATS_URL", "nats://127.0.0.1:1")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pause"}, "usage"},
		{[]string{"pause", "a.b"}, "tenant"},
		{[]string{"pause", "acme", "--for", "-1m"}, "--for"},
		{[]string{"pause", "acme", "--for", "0s"}, "--for must be positive"},
		{[]string{"pause", "acme", "--until", "tomorrow"}, "RFC 3339"},
		{[]string{"pause", "acme", "--until", "2000-01-01T00:00:00Z"}, "not in the future"},
		{[]string{"pause", "acme", "--for", "1m", "--until", "2999-01-01T00:00:00Z"}, "not both"},
		{[]string{"pause", "acme", "--reason", "a\nb"}, "control character"},
		{[]string{"resume", "acme", "--reason", "x"}, "usage"},
		{[]string{"resume", "bad tenant"}, "tenant"},
		{[]string{"top", "-n", "0"}, "-n"},
		{[]string{"top", "extra"}, "usage"},
	} {
		var out, errOut bytes.Buffer
		if got := run(c.args, &out, &errOut); got != exitConfig || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d mentioning %q", c.args, got, errOut.String(), exitConfig, c.want)
		}
	}
}

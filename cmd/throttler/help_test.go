package main

import (
	"runtime"
	"strings"
	"testing"

	"github.com/throttler/throttler/config"
)

// TestHelpNamesCommandsVariablesAndTheDocs checks that --help lists every
// command, ten variables with their defaults from the configuration, and
// where the rest are documented.
func TestHelpNamesCommandsVariablesAndTheDocs(t *testing.T) {
	r := cli(t, "--help")
	for _, c := range []string{"run", "check-config", "limits", "inspect", "purge", "dlq", "pub", "sub", "demo", "version"} {
		r.want(t, "help", exitOK, []string{"\n  " + c + " "}, nil)
	}
	if len(mostUsed) != 10 {
		t.Fatalf("help lists %d variables, want 10", len(mostUsed))
	}
	known := config.Known()
	for _, v := range mostUsed {
		if !strings.Contains(strings.Join(known, " "), v[0]) {
			t.Errorf("help lists %s, which the worker does not read", v[0])
		}
		r.want(t, "help", exitOK, []string{"  " + v[0] + " "}, nil)
	}
	r.want(t, "help", exitOK, []string{"(default nats://127.0.0.1:4222)", "(default 100/s)", "docs/configuration.md", "README"}, nil)
}

// TestVersion checks that throttler version names the Go release that
// built it, and a commit (or says it is unknown).
func TestVersion(t *testing.T) {
	cli(t, "version").want(t, "version", exitOK, []string{"throttler ", ", commit ", "built with " + runtime.Version()}, nil)
}

// TestCommandHelpReadsNothing checks that -h or --help after a command
// prints its usage and exits 0 before the command reads the environment
// or connects: before, `inspect --help` inspected a tenant named
// "--help" on whatever servers the environment named, and `run --help`
// started the worker. A bad setting in the environment shows that nothing
// read it (it would exit 2), and an empty stderr that nothing was
// announced or connected.
func TestCommandHelpReadsNothing(t *testing.T) {
	t.Setenv("THROTTLER_MAX_ACK_PENDING", "not-a-number")
	for _, args := range [][]string{
		{"inspect", "--help"}, {"inspect", "acme", "-h"}, {"check-config", "--help"}, {"run", "--help"},
		{"limits", "set", "acme", "5/s", "--help"}, {"purge", "acme", "--yes", "-h"}, {"dlq", "list", "--help"},
		{"pause", "acme", "--help"}, {"resume", "-h"}, {"top", "--help"}, {"version", "--help"},
	} {
		r := cli(t, args...)
		r.want(t, strings.Join(args, " "), exitOK, []string{"usage: throttler"}, nil)
		if r.stderr != "" {
			t.Errorf("%s wrote to stderr: %s", strings.Join(args, " "), r.stderr)
		}
	}
}

// TestBadArgumentsSayWhat: a refused argument is named with what is
// wanted, not only the usage line or the flag package's "parse error".
func TestBadArgumentsSayWhat(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "show"}, "give its ID"},
		{[]string{"pause", "acme", "--for", "xyz"}, "want a duration such as 90m"},
		{[]string{"top", "-n", "abc"}, `invalid value "abc" for flag -n`},
		{[]string{"top", "extra"}, `unexpected "extra"`},
	} {
		cli(t, c.args...).want(t, strings.Join(c.args, " "), exitConfig, nil, []string{c.want})
	}
}

package main

import (
	"flag"
	"io"
	"runtime"
	"slices"
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

// TestUnknownFlagsAndArgumentsAreRefused: every command refuses a flag it
// does not know, or an argument it does not take, with its usage and
// exit 2, before it reads the environment or connects. Before, `run
// --bogus` started the worker, `check-config extra` and `version --bogus`
// exited 0, and `inspect --bogus` and `limits get --bogus` read a tenant
// named "--bogus" (it passes tenant.Validate), and `demo --bogus` exited 1.
func TestUnknownFlagsAndArgumentsAreRefused(t *testing.T) {
	t.Setenv("THROTTLER_MAX_ACK_PENDING", "not-a-number") // read, it would be named
	t.Setenv("NATS_URL", "nats://127.0.0.1:1")
	for _, args := range [][]string{
		{"run", "--bogus"}, {"run", "extra"}, {"check-config", "--bogus"}, {"check-config", "extra"},
		{"version", "--bogus"}, {"--version", "extra"},
		{"inspect", "--bogus"}, {"inspect", "--bogus", "--json"}, {"inspect", "--global", "--frob"},
		{"limits", "get", "--bogus"}, {"limits", "set", "--bogus", "5/s"}, {"limits", "list", "--frob"},
		{"pause", "--bogus"}, {"resume", "--bogus"}, {"credits", "get", "--bogus"},
		{"purge", "--bogus", "--yes"}, {"top", "--bogus"},
	} {
		r := cli(t, args...)
		r.want(t, strings.Join(args, " "), exitConfig, nil, []string{"usage: throttler"})
		if contains(r.stderr, "THROTTLER_MAX_ACK_PENDING") || contains(r.stdout, "never seen") {
			t.Errorf("%s read the environment or a server:\n%s%s", strings.Join(args, " "), r.stdout, r.stderr)
		}
	}
	// demo prints the flag package's usage, and says its command line is bad.
	cli(t, "demo", "--bogus").want(t, "demo --bogus", exitConfig, nil, []string{"throttler demo: bad command line"})
	cli(t, "demo", "extra").want(t, "demo extra", exitConfig, nil, []string{"throttler demo: bad command line"})
	cli(t, "help", "--bogus").want(t, "help --bogus", exitConfig, nil, []string{`throttler help: takes no arguments, got "--bogus"`})
	cli(t, "help", "-h").want(t, "help -h", exitOK, []string{"commands:"}, nil)
}

// TestDoubleDashEndsTheFlags: a tenant may start with '-' (tenant.Validate
// allows it), so after "--" an argument is never a flag; a "--" that is a
// flag's value ends nothing.
func TestDoubleDashEndsTheFlags(t *testing.T) {
	for _, c := range []struct {
		args       []string
		rest       []string
		yes        bool
		reasonWant string
	}{
		{[]string{"acme", "--yes"}, []string{"acme"}, true, ""},
		{[]string{"--yes", "--", "-acme"}, []string{"-acme"}, true, ""},
		{[]string{"--", "-acme", "--yes"}, []string{"-acme", "--yes"}, false, ""},
		{[]string{"--reason", "--", "acme", "--yes"}, []string{"acme"}, true, "--"},
		{[]string{"--reason=x", "--", "--yes"}, []string{"--yes"}, false, "x"},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		yes := fs.Bool("yes", false, "")
		reason := fs.String("reason", "", "")
		rest, err := parseInterleaved(fs, c.args)
		if err != nil || !slices.Equal(rest, c.rest) || *yes != c.yes || *reason != c.reasonWant {
			t.Errorf("%q: rest %q, --yes %v, --reason %q, %v; want %q, %v, %q", c.args, rest, *yes, *reason, err, c.rest, c.yes, c.reasonWant)
		}
	}
}

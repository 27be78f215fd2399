package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/throttler/throttler/config"
	"github.com/throttler/throttler/internal/app"
)

// commands are the subcommands, as `throttler help` lists them.
var commands = [][2]string{
	{"run", "run the worker until SIGTERM or SIGINT (the default)"},
	{"check-config", "validate the environment, print the effective configuration (secrets masked)"},
	{"limits set|get|list|rm|history", "change and read tenants' limits, live; _global and --group NAME for those above them"},
	{"inspect TENANT|--global|--group NAME [--json]", "why a tenant's jobs wait, or what a level above it holds, from NATS and Redis"},
	{"purge TENANT [--older-than D] --yes", "remove a tenant's waiting jobs (without --yes, count them)"},
	{"dlq list|show|replay|purge", "the dead letters: list, show one, publish again, remove"},
	{"pause TENANT [--until T|--for D] [--reason R] [--json]", "stop every worker starting a tenant's jobs (they wait, uncharged)"},
	{"resume TENANT [--json]", "lift a pause: the tenant's waiting jobs come back at once, in order"},
	{"credits add|set|get|history", "a tenant's prepaid balance (the term credits): top up, set, read, its changes"},
	{"top [-n N] [--json]", "every tenant at once, sorted by jobs waiting, refreshed each second"},
	{"pub [-H K:V] [-n N] SUBJECT [DATA]", "publish jobs to the jobs stream"},
	{"sub [SUBJECT...]", "print what arrives on subjects (done.> and dlq.> by default)"},
	{"demo [-duration 20s] [-workers 2]", "a three-tenant demo with an embedded NATS, against REDIS_URL"},
	{"version", "the version, commit and Go version of this binary"},
	{"help", "this text"},
}

// mostUsed are the ten variables most often set, as help lists them; the
// rest are documented in docs/configuration.md (the README lists the same ten).
var mostUsed = [][2]string{
	{"NATS_URL", "NATS server URL(s), comma-separated"},
	{"REDIS_URL", "Redis URL (redis:// or rediss://, user, password, DB)"},
	{"THROTTLER_SUBJECTS", "subjects the jobs stream binds and the worker consumes"},
	{"THROTTLER_TENANT_FROM", "where a job's tenant is: subject:N or header:Name"},
	{"THROTTLER_DEFAULT_LIMIT", "limits of every tenant without its own: RATE/UNIT[:BURST]+..."},
	{"THROTTLER_TENANT_LIMITS", "per-tenant limits: acme=50/s:100,globex=5/m"},
	{"THROTTLER_HANDLER", "forward (publish admitted jobs on) or http"},
	{"THROTTLER_HTTP_URL", "with http: where jobs are sent"},
	{"THROTTLER_CONCURRENCY", "handlers running at once per worker"},
	{"THROTTLER_METRICS_ADDR", "host:port of /healthz, /readyz and /metrics; empty is off"},
}

// printHelp writes the help: the commands, the ten variables most set
// with their defaults, and where the rest are documented.
func printHelp(w io.Writer) {
	fmt.Fprintln(w, "throttler: a worker that enforces per-tenant job quotas, over NATS JetStream and Redis.")
	fmt.Fprintln(w, "\nusage: throttler [COMMAND] [--quiet]\n\ncommands:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", c[0], c[1])
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "\nThe commands that talk to servers print on stderr which NATS and Redis they use;")
	fmt.Fprintln(w, "--quiet leaves that out. Everything is configured by environment variables; the")
	fmt.Fprintln(w, "ten most set:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, v := range mostUsed {
		def := config.Default(v[0])
		if def == "" {
			def = "empty"
		}
		fmt.Fprintf(tw, "  %s\t%s\t(default %s)\n", v[0], v[1], def)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\nEvery variable (%d in all), what it accepts and its default: docs/configuration.md\n", len(config.Known()))
	fmt.Fprintln(w, "in the source tree (the README starts from the first steps); the commands'")
	fmt.Fprintln(w, "own usage: throttler limits, credits, inspect, purge, dlq, pause, and pub -h, sub -h, demo -h.")
}

// printVersion writes the binary's version, commit and Go version.
func printVersion(w io.Writer) {
	b := app.ReadBuild()
	fmt.Fprintf(w, "throttler %s, commit %s, built with %s\n", b.Version, b.Commit, b.GoVersion)
}

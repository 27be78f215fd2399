package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/throttler/throttler/internal/app"
	inspectpkg "github.com/throttler/throttler/internal/inspect"
	"github.com/throttler/throttler/throttle"
)

// inspectLevel gathers what the servers hold about level lv (`inspect
// --global`, `inspect --group NAME`). It only reads.
func inspectLevel(ctx context.Context, cfg *app.Settings, lv throttle.Level) (inspectpkg.LevelReport, error) {
	src, done, err := inspectSources(cfg)
	if err != nil {
		return inspectpkg.LevelReport{}, err
	}
	defer done()
	in, err := inspectpkg.Level(ctx, src, lv)
	if err != nil {
		return inspectpkg.LevelReport{}, err
	}
	if n := envNote(in.Source); n != "" {
		in.Note = strings.Join(nonEmpty(in.Note, n), "; ")
	}
	return in, nil
}

// nonEmpty returns the strings of ss that are not empty.
func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// printLevel writes in for people.
func printLevel(w io.Writer, in inspectpkg.LevelReport) {
	mode := "enforced"
	if in.Shadow {
		mode = "in shadow mode: every job passes it; the buckets below count what enforcing would do"
	}
	fmt.Fprintf(w, "level %s at %s\n", in.Level, in.At.Format(time.RFC3339Nano))
	fmt.Fprintf(w, "limits %s from %s, %s\n", in.Limits, describe(in.Source), mode)
	if in.Note != "" {
		fmt.Fprintf(w, "  %s\n", in.Note)
	}
	if in.Source.Ignored != nil {
		fmt.Fprintf(w, "  not applied: %s\n", in.Source.Ignored)
	}
	printBuckets(w, in.At, in.Buckets)
	if in.WaitSeconds > 0 {
		fmt.Fprintf(w, "its terms make a job arriving now wait %s, held by %s (exact)",
			time.Duration(in.WaitSeconds*float64(time.Second)).Round(time.Microsecond), in.Binding)
	} else {
		fmt.Fprint(w, "its terms let a job arriving now pass at once (exact)")
	}
	fmt.Fprintln(w, "; a job also waits for its turn behind the jobs placed before it in the list")
	flows := fmt.Sprintf("%d flows", in.Flows)
	if in.Flows == 1 {
		flows = "1 flow"
	}
	if !in.FlowsExact {
		flows = fmt.Sprintf("at least %d flows (too many to read every one's place)", in.Flows)
	}
	what := "tenants"
	if in.Level == throttle.GlobalKey {
		what = "tenants, or the groups of jobs with one"
	}
	fmt.Fprintf(w, "jobs waiting for a turn: %d (exact), of %s (%s)\n", in.Queued, flows, what)
	if len(in.NextInLine) > 0 {
		var parts []string
		for _, t := range in.NextInLine {
			parts = append(parts, fmt.Sprintf("%s %d", t.Tenant, t.Jobs))
		}
		fmt.Fprintf(w, "next in line, by tenant among the first %d jobs: %s\n", in.HeadRead, strings.Join(parts, ", "))
	}
	fmt.Fprintf(w, "slots granted and not yet used: %d, %d of them still to come (exact)\n", in.Passes, in.PassesAhead)
}

// printTenantLevels writes the limits above a tenant and the levels
// holding its jobs, for people.
func printTenantLevels(w io.Writer, l *inspectpkg.TenantLevels) {
	var above []string
	if l.Global != "" {
		above = append(above, fmt.Sprintf("%s %s from %s", throttle.GlobalKey, l.Global, describe(*l.GlobalSource)))
	}
	if l.GroupFrom != "" {
		above = append(above, fmt.Sprintf("groups: per job (THROTTLER_GROUP_FROM=%s), see throttler inspect --group NAME", l.GroupFrom))
	}
	if len(above) > 0 {
		fmt.Fprintf(w, "limits above it: %s\n", strings.Join(above, "; "))
	}
	for _, h := range l.Queues {
		exact := "exact"
		if !h.Jobs.Exact {
			exact = "at least: the list is too long to read whole"
		}
		fmt.Fprintf(w, "held by %s: %d of its jobs wait there for a turn (%s); %d of the %d jobs in line are called before its first\n",
			h.Level, h.Jobs.N, exact, h.Ahead, h.Queued)
	}
}

package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/throttler/throttler/internal/ops"
)

// dlqUsage is the usage of `throttler dlq`.
const dlqUsage = `usage: throttler dlq list [FILTERS] [--json]             the dead letters, oldest first
       throttler dlq show ID [--json]                    one dead letter, its headers and the start of its data
       throttler dlq replay [FILTERS] [--dry-run] [--json]  publish the jobs again to their original subjects
       throttler dlq purge [FILTERS] [--json] --yes      remove dead letters
FILTERS: --tenant T  --reason TEXT  --since D  --limit N`

// showDataBytes is how much of a dead letter's data `dlq show` prints.
const showDataBytes = 512

// dlqCmd runs `throttler dlq ARGS` and returns the exit status.
func dlqCmd(args []string, quiet bool, stdout, stderr io.Writer) int {
	fail := func(status int, format string, a ...any) int {
		fmt.Fprintf(stderr, "throttler dlq: "+format+"\n", a...)
		return status
	}
	if len(args) == 0 || !slices.Contains([]string{"list", "show", "replay", "purge"}, args[0]) {
		return fail(exitConfig, "want list, show, replay or purge\n%s", dlqUsage)
	}
	sub := args[0]
	fs := flag.NewFlagSet("dlq "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var filter ops.DeadLetterFilter
	var since time.Duration
	if sub != "show" {
		fs.StringVar(&filter.Tenant, "tenant", "", "")
		fs.StringVar(&filter.Reason, "reason", "", "")
		fs.Var(durationValue{&since}, "since", "")
		fs.IntVar(&filter.Limit, "limit", 0, "")
	}
	asJSON := fs.Bool("json", false, "")
	dryRun := fs.Bool("dry-run", false, "")
	yes := fs.Bool("yes", false, "")
	rest, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return fail(exitConfig, "%s: %v\n%s", sub, err, dlqUsage)
	}
	var id uint64
	switch {
	case sub == "show" && len(rest) == 1:
		if id, err = strconv.ParseUint(rest[0], 10, 64); err != nil || id == 0 {
			return fail(exitConfig, "show: ID %q: want a dead letter's id, a whole number from 1", rest[0])
		}
	case sub == "show" && len(rest) == 0:
		return fail(exitConfig, "show: which dead letter? give its ID (dlq list shows them)\n%s", dlqUsage)
	case len(rest) > 0 || sub == "show":
		return fail(exitConfig, "%s: unexpected %q\n%s", sub, strings.Join(rest, " "), dlqUsage)
	}
	if *dryRun && sub != "replay" && sub != "purge" {
		return fail(exitConfig, "%s takes no --dry-run (replay and purge do)\n%s", sub, dlqUsage)
	}
	if *yes && sub != "purge" {
		return fail(exitConfig, "%s takes no --yes (purge does)\n%s", sub, dlqUsage)
	}
	if since > 0 {
		filter.Since = time.Now().Add(-since)
	}
	if err := filter.Validate(); err != nil {
		return fail(exitConfig, "%v", err)
	}
	s, status := openOps("dlq", stderr, quiet, uses{nats: true})
	if status != exitOK {
		return status
	}
	defer s.close()

	var out any
	switch sub {
	case "list":
		var ds []ops.DeadLetter
		if ds, err = ops.ListDeadLetters(s.ctx, s.fleet, filter); err == nil && !*asJSON {
			printDeadLetters(stdout, ds)
		}
		out = ds
	case "show":
		var d ops.DeadLetter
		if d, err = ops.ShowDeadLetter(s.ctx, s.fleet, id, showDataBytes); err == nil && !*asJSON {
			printDeadLetter(stdout, d)
		}
		out = d
	case "replay":
		var r ops.ReplayReport
		r, err = ops.ReplayDeadLetters(s.ctx, s.fleet, ops.ReplayOptions{DeadLetterFilter: filter, DryRun: *dryRun})
		if shown(err, *asJSON, len(r.Replayed)+len(r.Skipped)) {
			printReplay(stdout, r)
		}
		out = r
	case "purge":
		var r ops.DeadLetterPurgeReport
		r, err = ops.PurgeDeadLetters(s.ctx, s.fleet, ops.DeadLetterPurgeOptions{DeadLetterFilter: filter, DryRun: *dryRun || !*yes})
		if shown(err, *asJSON, len(r.Removed)) {
			printDLQPurge(stdout, r)
		}
		out = r
	}
	if msg, ok := streamMissing(s.cfg, err); ok {
		return fail(exitFailed, "%s: %s", sub, msg)
	}
	if err != nil {
		return fail(statusOf(err), "%s: %v", sub, err)
	}
	if *asJSON {
		if err := printJSON(stdout, out); err != nil {
			return fail(exitFailed, "%v", err)
		}
	}
	return exitOK
}

// shown reports whether a replay's or a purge's report is printed as
// text: after a success without --json, or after a failure once it had done
// something (what it did before failing). A failure before anything
// was done prints none: "replayed 0 dead letters" then an error read as
// a success that went wrong.
func shown(err error, asJSON bool, done int) bool {
	if err != nil {
		return done > 0
	}
	return !asJSON
}

// printDeadLetters writes a table of dead letters.
func printDeadLetters(w io.Writer, ds []ops.DeadLetter) {
	if len(ds) == 0 {
		fmt.Fprintln(w, "no dead letters")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTENANT\tFAILURES\tTIME\tSIZE\tREASON")
	for _, d := range ds {
		reason := d.Reason
		if len(reason) > 80 {
			reason = reason[:77] + "..."
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%d\t%s\n", d.ID, d.Tenant, d.Failures, d.Time.Format(time.RFC3339), d.Size, reason)
	}
	tw.Flush()
}

// printDeadLetter writes one dead letter: its fields, its headers, and
// the start of its data.
func printDeadLetter(w io.Writer, d ops.DeadLetter) {
	fmt.Fprintf(w, "id:        %d (stream %s)\ntenant:    %s\nreason:    %s\nfailures:  %d\ntime:      %s\nsize:      %d bytes\n",
		d.ID, d.Stream, d.Tenant, d.Reason, d.Failures, d.Time.Format(time.RFC3339Nano), d.Size)
	if d.JobID != "" {
		fmt.Fprintf(w, "job:       %s\n", d.JobID)
	}
	if d.Subject != "" {
		fmt.Fprintf(w, "subject:   %s (where replay publishes it)\n", d.Subject)
	}
	if d.Truncated != "" {
		fmt.Fprintf(w, "cut:       %s (not replayable)\n", d.Truncated)
	}
	fmt.Fprintln(w, "headers:")
	keys := make([]string, 0, len(d.Header))
	for k := range d.Header {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range d.Header[k] {
			fmt.Fprintf(w, "  %s: %s\n", k, v)
		}
	}
	fmt.Fprintln(w, "data:")
	if utf8.Valid(d.Data) {
		fmt.Fprintf(w, "  %s\n", d.Data)
	} else {
		fmt.Fprintf(w, "  %q\n", d.Data)
	}
	if d.DataCut > 0 {
		fmt.Fprintf(w, "  ... %d more bytes\n", d.DataCut)
	}
}

// printReplay writes what a replay did, or would do.
func printReplay(w io.Writer, r ops.ReplayReport) {
	verb := "replayed"
	if r.DryRun {
		verb = "would replay"
	}
	again := 0
	for _, p := range r.Replayed {
		if p.Again {
			again++
		}
	}
	fmt.Fprintf(w, "%s %d dead letters", verb, len(r.Replayed))
	if again > 0 {
		fmt.Fprintf(w, " (%d already stored by an interrupted replay, stored once)", again)
	}
	fmt.Fprintln(w)
	for _, p := range r.Skipped {
		fmt.Fprintf(w, "skipped %d (%s): %s\n", p.ID, p.Tenant, p.Why)
	}
}

// printDLQPurge writes what a purge of dead letters did, or would do.
func printDLQPurge(w io.Writer, r ops.DeadLetterPurgeReport) {
	if r.DryRun {
		fmt.Fprintf(w, "would remove %d dead letters; nothing removed: add --yes (without --dry-run) to remove them\n", len(r.Removed))
		return
	}
	fmt.Fprintf(w, "removed %d dead letters\n", len(r.Removed))
}

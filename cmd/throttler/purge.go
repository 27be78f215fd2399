package main

import (
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/throttler/throttler/internal/ops"
	"github.com/throttler/throttler/tenant"
)

// purgeUsage is the usage of `throttler purge`.
const purgeUsage = `usage: throttler purge TENANT [--older-than D] [--dry-run] [--json] --yes
       removes the tenant's waiting jobs (pending, moved, parked); without --yes it only counts them`

// purgeCmd runs `throttler purge ARGS` and returns the exit status.
func purgeCmd(args []string, quiet bool, stdout, stderr io.Writer) int {
	fail := func(status int, format string, a ...any) int {
		fmt.Fprintf(stderr, "throttler purge: "+format+"\n", a...)
		return status
	}
	fs := flag.NewFlagSet("purge", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var olderThan time.Duration
	fs.Var(durationValue{&olderThan}, "older-than", "only jobs first published longer ago than this")
	dryRun := fs.Bool("dry-run", false, "only count")
	yes := fs.Bool("yes", false, "remove")
	asJSON := fs.Bool("json", false, "one JSON document")
	rest, err := parseInterleaved(fs, args)
	if err != nil {
		return fail(exitConfig, "%v\n%s", err, purgeUsage)
	}
	if len(rest) != 1 {
		return fail(exitConfig, "want one TENANT\n%s", purgeUsage)
	}
	if err := tenant.Validate(rest[0]); err != nil {
		return fail(exitConfig, "TENANT: %v", err)
	}
	s, status := openOps("purge", stderr, quiet, uses{nats: true, redis: true})
	if status != exitOK {
		return status
	}
	defer s.close()
	opts := ops.PurgeOptions{Tenant: rest[0], DryRun: *dryRun || !*yes}
	if olderThan > 0 {
		opts.Before = time.Now().Add(-olderThan)
	}
	// The parked jobs' places in the caps' and the levels' waiting lists
	// go with them.
	lim, closeRedis, err := s.limiter()
	if err != nil {
		return fail(exitConfig, "%v", err)
	}
	defer closeRedis()
	opts.Waiting, opts.Levels = lim, lim
	rep, err := ops.PurgeTenant(s.ctx, s.fleet, opts)
	if err != nil {
		if rep.Removed > 0 {
			printPurge(stderr, rep)
		}
		if msg, ok := streamMissing(s.cfg, err); ok {
			return fail(exitFailed, "%s", msg)
		}
		return fail(statusOf(err), "%v", err)
	}
	if *asJSON {
		if err := printJSON(stdout, rep); err != nil {
			return fail(exitFailed, "%v", err)
		}
	} else {
		printPurge(stdout, rep)
	}
	for _, w := range rep.Warnings {
		fmt.Fprintln(stderr, "throttler purge: warning:", w)
	}
	return exitOK
}

// printPurge writes what a purge did, or would do.
func printPurge(w io.Writer, r ops.PurgeReport) {
	verb := "removed"
	if r.DryRun {
		verb = "would remove"
	}
	fmt.Fprintf(w, "tenant %s: %s %d waiting jobs: %d pending, %d moved, %d parked, %d fast, %d woken\n",
		r.Tenant, verb, r.Removed, r.Pending, r.Moved, r.Parked, r.Fast, r.Woken)
	if r.InFlight > 0 {
		fmt.Fprintf(w, "left to their workers: up to %d delivered and not yet acked (running, or NAK'd to wait); run purge again once they are deferred\n", r.InFlight)
	}
	if r.DryRun {
		fmt.Fprintln(w, "nothing removed: add --yes (without --dry-run) to remove them")
		return
	}
	if r.Charged > 0 {
		// On purpose (docs/operations.md, "What a purge leaves charged"),
		// but a surprise under a low limit: say it where it is felt.
		fmt.Fprintf(w, "the slots %d of the removed jobs held stay charged: %s's next jobs wait as if they had run (throttler inspect %s says how long)\n", r.Charged, r.Tenant, r.Tenant)
	}
}

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/throttler/throttler/internal/app"
	inspectpkg "github.com/throttler/throttler/internal/inspect"
	"github.com/throttler/throttler/tenant"
	"github.com/throttler/throttler/throttle"
)

// inspectUsage is the usage of `throttler inspect`.
const inspectUsage = `usage: throttler inspect TENANT [--json]      why a tenant's jobs wait
       throttler inspect --global [--json]     the global limit: its buckets, the jobs waiting for a turn
       throttler inspect --group NAME [--json] a group's limit, the same`

// seenRule is how inspect tells a tenant it has never seen, for the
// output and the docs: no trace anywhere of the places a tenant's jobs
// leave one.
const seenRule = "no bucket state, reserved slot, settled debt's shift, handler failure or lease in Redis (bucket states expire once full again), " +
	"no job in the jobs stream, none moved off the consumer, no limits of its own"

// inspectCmd runs `throttler inspect ARGS` and returns the exit status.
func inspectCmd(args []string, quiet bool, stdout, stderr io.Writer) int {
	fail := func(status int, format string, a ...any) int {
		fmt.Fprintf(stderr, "throttler inspect: "+format+"\n", a...)
		return status
	}
	// Flags, not arguments matched by hand: an unknown one is refused
	// rather than inspected as a tenant ("--bogus" passes
	// tenant.Validate); a tenant that starts with '-' comes after "--".
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "")
	global := fs.Bool("global", false, "")
	group := fs.Bool("group", false, "") // its NAME is the argument
	rest, err := parseInterleaved(fs, args)
	if err != nil {
		return fail(exitConfig, "%v\n%s", err, inspectUsage)
	}
	want := 1
	if *global {
		want = 0
	}
	if len(rest) != want || (*global && *group) {
		return fail(exitConfig, "%s", inspectUsage)
	}
	var level *throttle.Level
	switch {
	case *global:
		level = &throttle.Global
	case *group:
		if err := tenant.ValidateGroup(rest[0]); err != nil {
			return fail(exitConfig, "%v", err)
		}
		level = &throttle.Level{Group: rest[0]}
	default:
		if err := tenant.Validate(rest[0]); err != nil {
			return fail(exitConfig, "%v", err)
		}
	}
	cfg, ok := loadConfig(stderr)
	if !ok {
		return exitConfig
	}
	announce(stderr, quiet, cfg.Config, uses{nats: true, redis: true})
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	var in any
	if level != nil {
		in, err = inspectLevel(ctx, cfg, *level)
	} else {
		in, err = inspect(ctx, cfg, rest[0])
	}
	if err != nil {
		return fail(exitFailed, "%v", redisUnreachable(cfg, err))
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(in); err != nil {
			return fail(exitFailed, "%v", err)
		}
		return exitOK
	}
	switch in := in.(type) {
	case inspectpkg.Report:
		printInspection(stdout, in)
	case inspectpkg.LevelReport:
		printLevel(stdout, in)
	}
	return exitOK
}

// inspectSources connects to the servers cfg names, for inspect to read,
// and returns a function that closes the connections.
func inspectSources(cfg *app.Settings) (inspectpkg.Sources, func(), error) {
	nc, js, err := connectJetStream(cfg, "inspect")
	if err != nil {
		return inspectpkg.Sources{}, nil, err
	}
	rdb, err := app.NewRedis(cfg.Config, 1)
	if err != nil {
		nc.Close()
		return inspectpkg.Sources{}, nil, err
	}
	return cfg.InspectSources(js, rdb), func() { _ = rdb.Close(); nc.Close() }, nil
}

// inspect gathers what the servers hold about tenant t. It only reads.
func inspect(ctx context.Context, cfg *app.Settings, t string) (inspectpkg.Report, error) {
	src, done, err := inspectSources(cfg)
	if err != nil {
		return inspectpkg.Report{}, err
	}
	defer done()
	in, err := inspectpkg.Tenant(ctx, src, t)
	if err != nil {
		return inspectpkg.Report{}, err
	}
	in.Note = envNote(in.Source)
	return in, nil
}

// printInspection writes in for people.
func printInspection(w io.Writer, in inspectpkg.Report) {
	mode := "enforced"
	if in.Shadow {
		mode = "in shadow mode: every job runs; the buckets below count what enforcing would do"
	}
	fmt.Fprintf(w, "tenant %s at %s\n", in.Tenant, in.At.Format(time.RFC3339Nano))
	if len(in.Seen) == 0 {
		fmt.Fprintf(w, "never seen: %s. Check the spelling (tenants are case-sensitive): a tenant that sent no job looks like this, "+
			"and so does one idle long enough for its buckets to refill", seenRule)
		if in.StoredJobs < 0 {
			fmt.Fprint(w, " (its jobs in the stream cannot be counted: the tenant is not a token of THROTTLER_SUBJECTS)")
		}
		fmt.Fprintln(w, ".")
	}
	fmt.Fprintf(w, "limits %s from %s, %s\n", in.Limits, describe(in.Source), mode)
	if in.Note != "" {
		fmt.Fprintf(w, "  %s\n", in.Note)
	}
	if in.Source.Ignored != nil {
		fmt.Fprintf(w, "  not applied: %s\n", in.Source.Ignored)
	}
	printBuckets(w, in.At, in.Buckets)
	switch {
	case in.Paused != nil && in.Paused.Active:
		until := "until `throttler resume " + in.Tenant + "`"
		if !in.Paused.Until.IsZero() {
			until = "until the pause ends, or `throttler resume " + in.Tenant + "` before"
		}
		fmt.Fprintf(w, "PAUSED %s (since %s, revision %d): no worker starts its jobs; they wait off the consumer, uncharged, %s\n",
			describePause(in.Paused.Pause), in.Paused.Since.Format(time.RFC3339), in.Paused.Revision, until)
	case in.Credits != nil && (!in.Credits.Trusted || in.Credits.WaitingFrom > 0 || in.Credits.Balance < 1):
		fmt.Fprintf(w, "a job arriving now waits for credits: %s\n", describeCredits(in.Credits))
	case inspectpkg.CapFull(in.Running, in.Cap):
		fmt.Fprintf(w, "a job arriving now waits for a lease of running cap %d (exact)\n", in.Running)
	case inspectpkg.CapFull(in.MaxRunning, in.Fleet):
		fmt.Fprintf(w, "a job arriving now waits for a lease of THROTTLER_MAX_RUNNING=%d (exact)\n", in.MaxRunning)
	case in.WaitSeconds > 0:
		fmt.Fprintf(w, "a job arriving now waits %s, held by %s (exact)\n",
			time.Duration(in.WaitSeconds*float64(time.Second)).Round(time.Microsecond), in.Binding)
	case in.Levels != nil && len(in.Levels.Queues) > 0:
		h := in.Levels.Queues[0]
		fmt.Fprintf(w, "a job arriving now passes its own limits at once (exact); %d of its jobs wait for a turn under %s, and a new one of the same flow takes its turn after them\n",
			h.Jobs.N, h.Level)
	default:
		fmt.Fprintln(w, "a job arriving now runs at once (exact)")
	}
	if in.Paused != nil && !in.Paused.Active {
		fmt.Fprintf(w, "a pause ended at %s (%s); its key stays until `throttler resume %s`\n",
			in.Paused.Until.Format(time.RFC3339), describePause(in.Paused.Pause), in.Tenant)
	}
	fmt.Fprintf(w, "jobs waiting: %d holding a reserved slot (exact), %d moved off the consumer into schedules (exact), about %d NAK'd on the consumer (estimate)\n",
		in.Jobs.Reserved.N, in.Jobs.Moved.N, in.Jobs.Naked.N)
	if in.Levels != nil {
		printTenantLevels(w, in.Levels)
	}
	if in.Debt != nil {
		fmt.Fprintf(w, "debt from settled cost: %s\n", describeDebt(in.Debt, in.At))
	}
	if in.Credits != nil {
		fmt.Fprintf(w, "credits: %s\n", describeCredits(in.Credits))
	}
	if in.Cap != nil {
		fmt.Fprintf(w, "running cap %d: %d running, %d called back to run, %d waiting for a lease (exact, fleet-wide)\n",
			in.Running, in.Cap.Running, in.Cap.Called, in.Cap.Waiting)
	}
	if in.Fleet != nil {
		fmt.Fprintf(w, "THROTTLER_MAX_RUNNING=%d, all tenants: %d running, %d called back to run, %d waiting for a lease, %d of them before %s's next job (exact)\n",
			in.MaxRunning, in.Fleet.Running, in.Fleet.Called, in.Fleet.Waiting, in.Fleet.Ahead, in.Tenant)
	}
	if len(in.Failures) == 0 {
		fmt.Fprintln(w, "handler failures in the last 24 h: none")
		return
	}
	ids := make([]string, 0, len(in.Failures))
	for id := range in.Failures {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	fmt.Fprintln(w, "handler failures in the last 24 h, by job (kept a day after a job's last failure, even once it has run):")
	for _, id := range ids {
		fmt.Fprintf(w, "  %s failed %d times\n", id, in.Failures[id])
	}
}

// printBuckets writes a table of buckets at at, for people.
func printBuckets(w io.Writer, at time.Time, buckets []inspectpkg.Bucket) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(buckets) > 0 {
		fmt.Fprintln(tw, "LIMIT\tTOKENS\tFULL AGAIN\tIN DEBT UNTIL\tA NEW JOB WAITS")
	}
	for _, b := range buckets {
		until := "-"
		if b.ReservedUntil != nil {
			until = fmt.Sprintf("in %s", b.ReservedUntil.Sub(at).Round(time.Millisecond))
		}
		tokens := fmt.Sprintf("%.2f of %d", b.Tokens, b.Burst)
		if b.Sliding {
			tokens = fmt.Sprintf("%d of %d in the span", b.InSpan-b.Ahead, b.Burst)
			if b.Ahead > 0 {
				tokens += fmt.Sprintf(", %d reserved ahead", b.Ahead)
			}
			if b.NextLeaves != nil {
				tokens += fmt.Sprintf(", the next leaves in %s", b.NextLeaves.Sub(at).Round(time.Millisecond))
			}
		}
		if b.Calendar && b.ResetsAt != nil {
			tokens = fmt.Sprintf("%d counted in the window of %d, resets in %s (at %s)", b.InWindow, b.Burst,
				b.ResetsAt.Sub(at).Round(time.Millisecond), b.ResetsAt.Format(time.RFC3339))
		}
		if b.StoredRate != 0 {
			tokens += fmt.Sprintf(" (stored at %d per period; carried over at the next decision)", b.StoredRate)
		}
		fmt.Fprintf(tw, "%s\t%s\tin %s\t%s\t%s\n", b.Limit, tokens, b.FullAt.Sub(at).Round(time.Millisecond), until,
			(time.Duration(b.WaitSeconds * float64(time.Second))).Round(time.Microsecond))
	}
	_ = tw.Flush()
}

// describeDebt says what the debt of costs settled above their charge
// holds at, for people.
func describeDebt(d *inspectpkg.Debt, at time.Time) string {
	secs := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)).Round(time.Millisecond) }
	s := "no reserved job left to move"
	if d.PendingJobs > 0 {
		s = fmt.Sprintf("reserved jobs run up to %s later than their slots (%d of them, moved when they come back; exact)",
			secs(d.LaterSeconds), d.PendingJobs)
	}
	if d.InDebtUntil != nil {
		s += fmt.Sprintf("; buckets in debt until %s (in %s): new jobs wait until then", d.InDebtUntil.Format(time.RFC3339Nano),
			d.InDebtUntil.Sub(at).Round(time.Millisecond))
	}
	return s + fmt.Sprintf("; all the debts together moved the slots reserved before them %s", secs(d.ShiftSeconds))
}

// describeCredits says what a tenant's balance holds, for people.
func describeCredits(c *throttle.CreditBalance) string {
	s := fmt.Sprintf("balance %d", c.Balance)
	if !c.Funded {
		s += " (no operator set or added to it since Redis holds it: never funded, or lost with a Redis that restarted empty; see throttler credits get)"
	}
	if !c.Trusted {
		s += " NOT TRUSTED (written before Redis last restarted or failed over; see throttler credits history, then credits set)"
	}
	if c.WaitingFrom > 0 {
		s += fmt.Sprintf(", jobs wait for a top-up, in order, from the job at stream sequence %d on", c.WaitingFrom)
	}
	if !c.GateUntil.IsZero() {
		s += ", a top-up's jobs go first until " + c.GateUntil.UTC().Format(time.RFC3339Nano)
	}
	return s
}

package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/config"
	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/internal/ops"
	"github.com/throttler/throttler/limits"
	"github.com/throttler/throttler/pause"
	"github.com/throttler/throttler/tenant"
	"github.com/throttler/throttler/throttle"
)

// inspectUsage is the usage of `throttler inspect`.
const inspectUsage = "usage: throttler inspect TENANT [--json]"

// inspection is what `throttler inspect` reports: why a tenant's jobs wait.
type inspection struct {
	Tenant string        `json:"tenant"`
	At     time.Time     `json:"at"`
	Limits string        `json:"limits"`
	Shadow bool          `json:"shadow"`
	Source limits.Source `json:"source"`
	// Buckets are the tenant's buckets now.
	Buckets []bucketView `json:"buckets"`
	// WaitSeconds is how long a new job would wait now, HeldBy the limit
	// that sets it.
	WaitSeconds float64 `json:"wait_seconds"`
	HeldBy      string  `json:"held_by,omitempty"`
	// Jobs counts the tenant's jobs that wait.
	Jobs jobCounts `json:"jobs"`
	// Running is the tenant's running cap (running:N), 0 for none; Cap
	// what it holds now.
	Running int64                 `json:"running_cap,omitempty"`
	Cap     *throttle.CapSnapshot `json:"cap,omitempty"`
	// MaxRunning is the fleet's cap (THROTTLER_MAX_RUNNING), 0 for none;
	// Fleet what it holds now, every tenant's.
	MaxRunning int64                 `json:"max_running,omitempty"`
	Fleet      *throttle.CapSnapshot `json:"fleet_cap,omitempty"`
	// WaitsForLease says a job arriving now would wait for a lease of
	// the tenant's cap or the fleet's, whatever its rate says.
	WaitsForLease bool `json:"waits_for_lease,omitempty"`
	// Paused is the tenant's pause (throttler pause), nil when it has
	// none; a pause whose --until has passed is shown with Active false.
	Paused *pausedView `json:"paused,omitempty"`
	// Failures maps each job whose handler failed, and that has not run
	// since, to its failures.
	Failures map[string]int64 `json:"handler_failures,omitempty"`
	// Note warns that the limits come from an environment that sets none
	// (envNote).
	Note string `json:"note,omitempty"`
	// Seen lists the traces the tenant left (seenRule); none means it was
	// never seen, or not for long.
	Seen []string `json:"seen"`
	// StoredJobs counts the tenant's jobs the jobs stream holds, -1 when
	// they cannot be told apart (tenant from a header, or a subject the
	// tenant's token cannot be found in).
	StoredJobs int `json:"stored_jobs"`
}

// seenRule is how inspect tells a tenant it has never seen, for the
// output and the docs: no trace anywhere of the places a tenant's jobs
// leave one.
const seenRule = "no bucket state, reserved slot, handler failure or lease in Redis (bucket states expire once full again), " +
	"no job in the jobs stream, none moved off the consumer, no limits of its own"

// pausedView is a tenant's pause as inspect shows it.
type pausedView struct {
	pause.Pause
	// Active says the pause holds now (its until, if any, is to come).
	Active bool `json:"active"`
}

// bucketView is one bucket as inspect shows it.
type bucketView struct {
	Limit         string     `json:"limit"`
	Tokens        float64    `json:"tokens"`
	Burst         int64      `json:"burst"`
	FullAt        time.Time  `json:"full_at"`
	ReservedUntil *time.Time `json:"reserved_until,omitempty"`
	WaitSeconds   float64    `json:"wait_seconds"`
	StoredRate    int64      `json:"stored_rate,omitempty"`
}

// jobCounts are the tenant's waiting jobs, each count saying whether it is
// exact.
type jobCounts struct {
	// Moved wait off the consumer, in schedules of the jobs stream: exact.
	Moved count `json:"moved"`
	// HoldingSlots hold a reserved slot in Redis, moved or NAK'd: exact.
	HoldingSlots count `json:"holding_slots"`
	// Naked wait on the consumer, NAK'd: an estimate, the slots held less
	// the jobs moved (a job just back for its slot counts as NAK'd).
	Naked count `json:"nakd"`
}

// count is a number and whether it is exact.
type count struct {
	N     int  `json:"n"`
	Exact bool `json:"exact"`
}

// inspectCmd runs `throttler inspect ARGS` and returns the exit status.
func inspectCmd(args []string, quiet bool, stdout, stderr io.Writer) int {
	fail := func(status int, format string, a ...any) int {
		fmt.Fprintf(stderr, "throttler inspect: "+format+"\n", a...)
		return status
	}
	asJSON := false
	var rest []string
	for _, a := range args {
		if a == "--json" {
			asJSON = true
			continue
		}
		rest = append(rest, a)
	}
	if len(rest) != 1 {
		return fail(exitConfig, "%s", inspectUsage)
	}
	t := rest[0]
	if err := tenant.Validate(t); err != nil {
		return fail(exitConfig, "%v", err)
	}
	cfg, ok := loadConfig(stderr)
	if !ok {
		return exitConfig
	}
	announce(stderr, quiet, cfg.Config, uses{nats: true, redis: true})
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	in, err := inspect(ctx, cfg, t)
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(in); err != nil {
			return fail(exitFailed, "%v", err)
		}
		return exitOK
	}
	printInspection(stdout, in)
	return exitOK
}

// inspect gathers what the servers hold about tenant t. It only reads.
func inspect(ctx context.Context, cfg *app.Settings, t string) (inspection, error) {
	nc, err := app.ConnectNATS(cfg.Config, "throttler-inspect", nats.Timeout(cliTimeout))
	if err != nil {
		return inspection{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return inspection{}, err
	}
	var kv jetstream.KeyValue
	if cfg.LimitsBucket != config.LimitsOff {
		kv, err = js.KeyValue(ctx, cfg.LimitsBucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			kv, err = nil, nil
		}
		if err != nil {
			return inspection{}, fmt.Errorf("the limits bucket: %w", err)
		}
	}
	eff, err := limits.Resolve(ctx, kv, cfg.Rules, reader(cfg), t)
	if err != nil {
		return inspection{}, err
	}

	var paused *pausedView
	if cfg.PauseBucket != config.LimitsOff {
		p, err := pause.Get(ctx, pauseOptions(js, cfg), t)
		if err != nil {
			return inspection{}, err
		}
		if p != nil {
			paused = &pausedView{Pause: *p, Active: p.Active(time.Now())}
		}
	}

	rdb, err := app.NewRedis(cfg.Config, 1)
	if err != nil {
		return inspection{}, err
	}
	defer rdb.Close()
	lim, err := throttle.New(rdb, throttle.Options{Policies: throttle.Rules{Default: eff.Policy}, Prefix: cfg.KeyPrefix})
	if err != nil {
		return inspection{}, err
	}
	snap, err := lim.Peek(ctx, t, time.Time{})
	if err != nil {
		return inspection{}, err
	}

	in := inspection{
		Tenant: t, At: snap.At.UTC(), Limits: cmp.Or(eff.Policy.Limits.String(), "none (no rate limit)"), Shadow: eff.Policy.Shadow, Source: eff.Source,
		WaitSeconds: snap.Wait.Seconds(), Failures: snap.Failures, Running: eff.Policy.Running, Cap: snap.Cap,
		Paused: paused,
	}
	if snap.Wait > 0 {
		in.HeldBy = snap.HeldBy.String()
	}
	for _, b := range snap.Buckets {
		v := bucketView{Limit: b.Limit.String(), Tokens: b.Tokens, Burst: b.Limit.Burst, FullAt: b.FullAt.UTC(),
			WaitSeconds: b.Wait.Seconds(), StoredRate: b.StoredRate}
		if !b.ReservedUntil.IsZero() {
			until := b.ReservedUntil.UTC()
			v.ReservedUntil = &until
		}
		in.Buckets = append(in.Buckets, v)
	}
	if cfg.MaxRunning > 0 {
		in.MaxRunning = cfg.MaxRunning
		if in.Fleet, err = lim.PeekFleetFor(ctx, t, snap.At); err != nil {
			return inspection{}, err
		}
	}
	in.WaitsForLease = capFull(in.Running, in.Cap) || capFull(in.MaxRunning, in.Fleet)
	moved, err := ops.WaitingFor(ctx, js, cfg.Stream, cfg.Schedules, t)
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return inspection{}, err
	}
	in.Jobs = jobCounts{
		Moved:        count{N: moved, Exact: true},
		HoldingSlots: count{N: snap.Reserved, Exact: true},
		Naked:        count{N: max(0, snap.Reserved-moved)},
	}
	in.StoredJobs = -1
	if cfg.TenantFromToken > 0 {
		if filters, ok := ops.TenantSubjects(cfg.Subjects, cfg.TenantFromToken, t); ok {
			in.StoredJobs, err = ops.StoredJobs(ctx, js, cfg.Stream, filters)
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				in.StoredJobs, err = 0, nil
			}
			if err != nil {
				return inspection{}, err
			}
		}
	}
	in.Seen = traces(in, snap, cfg)
	in.Note = envNote(in.Source)
	return in, nil
}

// traces lists what the servers hold of tenant in's jobs and limits.
func traces(in inspection, snap throttle.Snapshot, cfg *app.Settings) []string {
	seen := []string{}
	for _, b := range snap.Buckets {
		if b.Stored {
			seen = append(seen, "bucket state in Redis")
			break
		}
	}
	if snap.Reserved > 0 {
		seen = append(seen, "reserved slots")
	}
	if len(snap.Failures) > 0 {
		seen = append(seen, "handler failures")
	}
	if c := snap.Cap; c != nil && c.Running+c.Called+c.Waiting > 0 {
		seen = append(seen, "leases or jobs waiting for one")
	}
	if in.StoredJobs > 0 {
		seen = append(seen, fmt.Sprintf("%d jobs in stream %s", in.StoredJobs, cfg.Stream))
	}
	if in.Jobs.Moved.N > 0 {
		seen = append(seen, "jobs moved off the consumer")
	}
	if _, ok := cfg.Rules.Tenants[in.Tenant]; ok || in.Source.Where == "bucket" || (in.Source.Ignored != nil && in.Source.Ignored.Key == in.Tenant) {
		seen = append(seen, "limits of its own")
	}
	return seen
}

// capFull reports whether a new job would wait for a lease of a cap of n
// holding c: no room once the jobs ahead of it have theirs.
func capFull(n int64, c *throttle.CapSnapshot) bool {
	return c != nil && n > 0 && c.Full(n)
}

// printInspection writes in for people.
func printInspection(w io.Writer, in inspection) {
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
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(in.Buckets) > 0 {
		fmt.Fprintln(tw, "LIMIT\tTOKENS\tFULL AGAIN\tRESERVED UNTIL\tA NEW JOB WAITS")
	}
	for _, b := range in.Buckets {
		until := "-"
		if b.ReservedUntil != nil {
			until = fmt.Sprintf("in %s", b.ReservedUntil.Sub(in.At).Round(time.Millisecond))
		}
		tokens := fmt.Sprintf("%.2f of %d", b.Tokens, b.Burst)
		if b.StoredRate != 0 {
			tokens += fmt.Sprintf(" (stored at %d per period; carried over at the next decision)", b.StoredRate)
		}
		fmt.Fprintf(tw, "%s\t%s\tin %s\t%s\t%s\n", b.Limit, tokens, b.FullAt.Sub(in.At).Round(time.Millisecond), until,
			(time.Duration(b.WaitSeconds * float64(time.Second))).Round(time.Microsecond))
	}
	_ = tw.Flush()
	switch {
	case in.Paused != nil && in.Paused.Active:
		fmt.Fprintf(w, "PAUSED %s (since %s, revision %d): no worker starts its jobs; they wait off the consumer, uncharged, until `throttler resume %s`\n",
			describePause(in.Paused.Pause), in.Paused.Since.Format(time.RFC3339), in.Paused.Revision, in.Tenant)
	case capFull(in.Running, in.Cap):
		fmt.Fprintf(w, "a job arriving now waits for a lease of running cap %d (exact)\n", in.Running)
	case capFull(in.MaxRunning, in.Fleet):
		fmt.Fprintf(w, "a job arriving now waits for a lease of THROTTLER_MAX_RUNNING=%d (exact)\n", in.MaxRunning)
	case in.WaitSeconds > 0:
		fmt.Fprintf(w, "a job arriving now waits %s, held by %s (exact)\n",
			time.Duration(in.WaitSeconds*float64(time.Second)).Round(time.Microsecond), in.HeldBy)
	default:
		fmt.Fprintln(w, "a job arriving now runs at once (exact)")
	}
	if in.Paused != nil && !in.Paused.Active {
		fmt.Fprintf(w, "a pause ended at %s (%s); its key stays until `throttler resume %s`\n",
			in.Paused.Until.Format(time.RFC3339), describePause(in.Paused.Pause), in.Tenant)
	}
	fmt.Fprintf(w, "jobs waiting: %d holding a reserved slot (exact), %d moved off the consumer into schedules (exact), about %d NAK'd on the consumer (estimate)\n",
		in.Jobs.HoldingSlots.N, in.Jobs.Moved.N, in.Jobs.Naked.N)
	if in.Cap != nil {
		fmt.Fprintf(w, "running cap %d: %d running, %d called back to run, %d waiting for a lease (exact, fleet-wide)\n",
			in.Running, in.Cap.Running, in.Cap.Called, in.Cap.Waiting)
	}
	if in.Fleet != nil {
		fmt.Fprintf(w, "THROTTLER_MAX_RUNNING=%d, all tenants: %d running, %d called back to run, %d waiting for a lease, %d of them before %s's next job (exact)\n",
			in.MaxRunning, in.Fleet.Running, in.Fleet.Called, in.Fleet.Waiting, in.Fleet.Ahead, in.Tenant)
	}
	if len(in.Failures) == 0 {
		fmt.Fprintln(w, "handler failures in flight: none")
		return
	}
	ids := make([]string, 0, len(in.Failures))
	for id := range in.Failures {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	fmt.Fprintln(w, "handler failures in flight, by job:")
	for _, id := range ids {
		fmt.Fprintf(w, "  %s failed %d times\n", id, in.Failures[id])
	}
}

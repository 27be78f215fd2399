package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/config"
	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/internal/ops"
	"github.com/throttler/throttler/limits"
)

// limitsUsage is the usage of `throttler limits`.
const limitsUsage = `usage: throttler limits set TENANT SPEC   set a tenant's limits (or _default's), e.g. 50/s:100+10000/d
       throttler limits get TENANT        the limits that apply to a tenant, and where they come from
       throttler limits list [PREFIX]     the tenants with limits of their own, then the limits above them
       throttler limits rm TENANT         remove a tenant's limits from the bucket
       throttler limits history TENANT    the values a tenant's key held, with times
TENANT may be _global, the limit of all tenants' jobs together, or, with --group NAME
in its place, a group's limit (set --group org-1 1000/s); list --group [PREFIX] lists
the global limit and the groups alone. Their specs hold rate and window terms and shadow.
set and rm bring a tenant's jobs moved off the consumer for slots under its old limits
back, to be decided under the new ones.`

// cliTimeout bounds each command's talk with NATS.
const cliTimeout = 10 * time.Second

// limitsCmd runs `throttler limits ARGS` and returns the exit status.
func limitsCmd(args []string, quiet bool, stdout, stderr io.Writer) int {
	fail := func(status int, format string, a ...any) int {
		fmt.Fprintf(stderr, "throttler limits: "+format+"\n", a...)
		return status
	}
	want := map[string]int{"set": 2, "get": 1, "list": -1, "rm": 1, "history": 1}
	// Flags, not arguments matched by hand: an unknown one is refused
	// rather than read as a tenant ("--bogus" passes tenant.Validate); a
	// tenant that starts with '-' comes after "--".
	fs := flag.NewFlagSet("limits", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	groupFlag := fs.Bool("group", false, "") // its NAME is the argument
	args, err := parseInterleaved(fs, args)
	if err != nil {
		return fail(exitConfig, "%v\n%s", err, limitsUsage)
	}
	group := *groupFlag
	if len(args) == 0 {
		return fail(exitConfig, "no command\n%s", limitsUsage)
	}
	n, ok := want[args[0]]
	switch {
	case !ok:
		return fail(exitConfig, "unknown command %q\n%s", args[0], limitsUsage)
	case n == 2 && len(args)-1 != n:
		return fail(exitConfig, "%s takes a TENANT (or --group NAME) and a SPEC, got %q\n%s", args[0], strings.Join(args[1:], " "), limitsUsage)
	case n == 1 && len(args)-1 != n:
		return fail(exitConfig, "%s takes a TENANT (or --group NAME), got %q\n%s", args[0], strings.Join(args[1:], " "), limitsUsage)
	case n < 0 && len(args) > 2:
		return fail(exitConfig, "list takes at most a PREFIX, got %q\n%s", strings.Join(args[1:], " "), limitsUsage)
	}
	cfg, ok := loadConfig(stderr)
	if !ok {
		return exitConfig
	}
	if cfg.LimitsBucket == config.LimitsOff {
		return fail(exitConfig, "THROTTLER_LIMITS_BUCKET is off: the workers read no limits from NATS")
	}
	announce(stderr, quiet, cfg.Config, uses{nats: true})
	var target limitsTarget
	if args[0] != "list" {
		if target, err = parseTarget(args[1], group); err != nil {
			return fail(exitConfig, "%v", err)
		}
	}
	if args[0] == "set" {
		// What the workers of this environment would do with the value,
		// before anything is written: a value they ignore is refused.
		if _, err := reader(cfg).Read(target.key, args[2]); err != nil {
			hint := ""
			if errors.Is(err, limits.ErrCapNeedsHTTP) {
				hint = fmt.Sprintf(" (this environment's THROTTLER_HANDLER is %s; run the command with the workers' environment)", cfg.Handler)
			}
			return fail(exitConfig, "%s: the workers would ignore it: %v%s; nothing written", args[2], err, hint)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	nc, js, err := connectJetStream(cfg, "limits")
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	defer nc.Close()
	kv, err := bucket(ctx, js, cfg, args[0] == "set")
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	c := limitsCLI{cfg: cfg, kv: kv, out: stdout}
	changed := false
	switch args[0] {
	case "set":
		changed, err = c.set(ctx, target.key, args[2])
	case "get":
		err = c.get(ctx, target)
	case "list":
		prefix := ""
		if len(args) == 2 {
			prefix = args[1]
		}
		err = c.list(ctx, prefix, group)
	case "rm":
		changed, err = c.rm(ctx, target)
	case "history":
		err = c.history(ctx, target.key)
	}
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	if changed && target.key == limits.DefaultKey {
		// The command cannot tell which tenants are under the default; the
		// workers can, for the tenants whose jobs they moved.
		fmt.Fprintln(stdout, "the workers bring back the jobs they moved of the tenants under the default, within seconds, and log how many")
	}
	if changed && target.level == nil && target.key != limits.DefaultKey {
		// The limits are written, which is what the command is for: a
		// failure to bring the moved jobs back (a server, or credentials
		// that may not read the schedule subjects) is a warning, as those
		// jobs come back by themselves at their slots.
		if err := c.bringBack(js, target.key); err != nil {
			fmt.Fprintf(stderr, "throttler limits: warning: the limits are written, but %v; those jobs come back by themselves at their slots\n", err)
		}
	}
	return exitOK
}

// bringBackTimeout bounds bringing a tenant's moved jobs back: about
// 10,000 jobs take 2.5 s.
const bringBackTimeout = 2 * time.Minute

// bringBack brings tenant's jobs moved to wait for slots under its old
// limits back to be decided under the new ones (ops.BringBackMoved).
func (c limitsCLI) bringBack(js jetstream.JetStream, tenant string) error {
	ctx, cancel := context.WithTimeout(context.Background(), bringBackTimeout)
	defer cancel()
	n, err := ops.BringBackMoved(ctx, c.cfg.Fleet(js), tenant, ops.BringBackMovedOptions{})
	if n > 0 {
		fmt.Fprintf(c.out, "%s: %d jobs waiting for slots under its old limits brought back, to be decided under the new ones\n", tenant, n)
	}
	return err
}

// bucket opens the limits bucket; set creates it when missing, with the
// jobs stream's replicas, as a worker would.
func bucket(ctx context.Context, js jetstream.JetStream, cfg *app.Settings, create bool) (jetstream.KeyValue, error) {
	if !create {
		kv, err := js.KeyValue(ctx, cfg.LimitsBucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, nil // no limits set yet: the environment's apply
		}
		return kv, err
	}
	replicas := 1
	if s, err := js.Stream(ctx, cfg.Stream); err == nil {
		replicas = s.CachedInfo().Config.Replicas
	}
	return limits.OpenBucket(ctx, js, cfg.LimitsBucket, replicas)
}

// limitsCLI carries out the `throttler limits` commands.
type limitsCLI struct {
	cfg *app.Settings
	kv  jetstream.KeyValue // nil when the bucket does not exist
	out io.Writer
}

// set writes spec, as given, to tenant's key, and reports whether the key
// held another value.
func (c limitsCLI) set(ctx context.Context, tenant, spec string) (changed bool, err error) {
	spec = strings.TrimSpace(spec)
	cur, err := c.kv.Get(ctx, tenant)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, fmt.Errorf("reading %s: %w", tenant, err)
	}
	rev, err := c.kv.PutString(ctx, tenant, spec)
	if err != nil {
		return false, fmt.Errorf("writing %s: %w", tenant, err)
	}
	p, _ := reader(c.cfg).Read(tenant, spec)
	fmt.Fprintf(c.out, "%s: %s (revision %d); every worker applies it within a second\n", tenant, p, rev)
	return cur == nil || string(cur.Value()) != spec, nil
}

// get prints the limits that apply to t's tenant, or level, and where
// they come from.
func (c limitsCLI) get(ctx context.Context, t limitsTarget) error {
	e, err := c.resolve(ctx, t)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "%s: %s from %s\n", t.key, specOrNone(e.Policy), describe(e.Source))
	if note := envNote(e.Source); note != "" {
		fmt.Fprintf(c.out, "  %s\n", note)
	}
	if e.Source.Ignored != nil {
		fmt.Fprintf(c.out, "  not applied: %s\n", e.Source.Ignored)
	}
	return nil
}

// envNote warns, for a limit read from this shell's environment, when the
// shell sets none of the variables it could come from: the workers'
// environment may well set some, and the command cannot see theirs.
func envNote(src limits.Source) string {
	vars := []string{"THROTTLER_DEFAULT_LIMIT", "THROTTLER_TENANT_LIMITS"}
	if slices.Contains(levelVars, src.Where) {
		vars = levelVars
	} else if !slices.Contains(vars, src.Where) {
		return ""
	}
	for _, v := range vars {
		if os.Getenv(v) != "" {
			return ""
		}
	}
	which := "neither " + strings.Join(vars, " nor ")
	if len(vars) > 2 {
		which = "none of " + strings.Join(vars, ", ")
	}
	return "read from this shell's environment, which sets " + which + "; " +
		"if the workers set them, run the command with the workers' settings (or keep limits in the bucket: limits set)"
}

// reader reads bucket values as the workers of cfg's environment do.
func reader(cfg *app.Settings) limits.Reader {
	return limits.Reader{DefaultBurst: cfg.DefaultBurst, ShadowAll: cfg.Shadow, NoCaps: cfg.Handler == config.HandlerForward}
}

// describe says where a policy comes from, in words.
func describe(s limits.Source) string {
	if s.Revision == 0 {
		return s.Where
	}
	return fmt.Sprintf("%s (revision %d, written %s)", s.Where, s.Revision, s.Written.UTC().Format(time.RFC3339))
}

// rm deletes t's key, and says what applies now. A tenant (or level)
// without a key of its own is told so and nothing is written: a delete
// marker would be one more revision in the key's history, for nothing. It
// reports whether it removed one.
func (c limitsCLI) rm(ctx context.Context, t limitsTarget) (removed bool, err error) {
	tenant := t.key
	var cur jetstream.KeyValueEntry
	if c.kv != nil {
		cur, err = c.kv.Get(ctx, tenant)
	}
	if c.kv == nil || errors.Is(err, jetstream.ErrKeyNotFound) {
		fmt.Fprintf(c.out, "%s: no limits of its own in the bucket; nothing removed\n", tenant)
		return false, c.get(ctx, t)
	}
	if err != nil {
		return false, fmt.Errorf("reading %s: %w", tenant, err)
	}
	// Only the value read: a write in between is not removed unseen.
	if err := c.kv.Delete(ctx, tenant, jetstream.LastRevision(cur.Revision())); err != nil {
		return false, fmt.Errorf("removing %s (revision %d; if it changed meanwhile, run the command again): %w", tenant, cur.Revision(), err)
	}
	fmt.Fprintf(c.out, "%s: removed from the bucket (was %q, revision %d)\n", tenant, cur.Value(), cur.Revision())
	return true, c.get(ctx, t)
}

// history prints the values tenant's key held, oldest first.
func (c limitsCLI) history(ctx context.Context, tenant string) error {
	if c.kv == nil {
		fmt.Fprintf(c.out, "%s: no values in the bucket (the bucket %s does not exist yet)\n", tenant, c.cfg.LimitsBucket)
		return nil
	}
	hist, err := c.kv.History(ctx, tenant)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		fmt.Fprintf(c.out, "%s: no values in the bucket\n", tenant)
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s's history: %w", tenant, err)
	}
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REVISION\tWRITTEN\tOPERATION\tVALUE")
	for _, e := range hist {
		value := string(e.Value())
		switch {
		case e.Operation() != jetstream.KeyValuePut:
			value = "-"
		default:
			if _, err := reader(c.cfg).Read(tenant, value); err != nil {
				value += " (ignored by the workers: " + err.Error() + ")"
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", e.Revision(), e.Created().UTC().Format(time.RFC3339Nano), operation(e.Operation()), value)
	}
	return tw.Flush()
}

// operation names a key-value operation in a word.
func operation(op jetstream.KeyValueOp) string {
	switch op {
	case jetstream.KeyValuePut:
		return "put"
	case jetstream.KeyValueDelete:
		return "delete"
	case jetstream.KeyValuePurge:
		return "purge"
	}
	return op.String()
}

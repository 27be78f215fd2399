package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/top"
)

// topUsage is the usage of `throttler top`.
const topUsage = "usage: throttler top [-n N] [--json]"

// topCmd runs `throttler top ARGS` and returns the exit status: a view
// refreshed every second until interrupted, or one JSON document.
func topCmd(args []string, quiet bool, stdout, stderr io.Writer) int {
	fail := func(status int, format string, a ...any) int {
		fmt.Fprintf(stderr, "throttler top: "+format+"\n", a...)
		return status
	}
	fs := flag.NewFlagSet("throttler top", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "")
	n := fs.Int("n", 20, "")
	rest, err := parseInterleaved(fs, args)
	if err != nil {
		return fail(exitConfig, "%v\n%s", err, topUsage)
	}
	if len(rest) != 0 {
		return fail(exitConfig, "unexpected %q\n%s", strings.Join(rest, " "), topUsage)
	}
	if *n < 1 {
		return fail(exitConfig, "-n must be at least 1, got %d", *n)
	}
	cfg, ok := loadConfig(stderr)
	if !ok {
		return exitConfig
	}
	announce(stderr, quiet, cfg.Config, uses{nats: true})
	nc, err := app.ConnectNATS(cfg.Config, "throttler-top", nats.Timeout(cliTimeout))
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	defer nc.Close()
	o := top.Options{Subject: app.TopSubject(cfg), N: *n, Wait: topWait}
	if *asJSON {
		ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
		defer cancel()
		v, err := gatherTop(ctx, nc, cfg, o)
		if err != nil {
			return fail(exitFailed, "%v", err)
		}
		// A list prints an array, as every command's --json does; what an
		// array cannot carry goes to stderr.
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		rows := v.Rows
		if rows == nil {
			rows = []top.Row{}
		}
		if err := enc.Encode(rows); err != nil {
			return fail(exitFailed, "%v", err)
		}
		fmt.Fprintf(stderr, "throttler top: %s, %d tenants, %d more than shown\n", workers(v.Workers), v.Tenants, v.More)
		return exitOK
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		v, err := gatherTop(ctx, nc, cfg, o)
		if ctx.Err() != nil {
			return exitOK
		}
		fmt.Fprint(stdout, "\033[H\033[2J") // home, clear the screen
		if err != nil {
			fmt.Fprintf(stdout, "throttler top: %v (retrying)\n", err)
		} else {
			printTop(stdout, v)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return exitOK
		}
	}
}

// topWait is how long top waits for the workers' answers.
const topWait = 1500 * time.Millisecond

// gatherTop is top.Gather, its errors said for the command: a fleet with
// no worker answering is told as such, with the settings to check.
func gatherTop(ctx context.Context, nc *nats.Conn, cfg *app.Settings, o top.Options) (top.View, error) {
	v, err := top.Gather(ctx, nc, o)
	if err == nil || ctx.Err() != nil {
		return v, err
	}
	if errors.Is(err, top.ErrNoWorkers) {
		return v, fmt.Errorf("no worker answered on %s: is a worker running on this NATS, with the same THROTTLER_STREAM (%s) and THROTTLER_CONSUMER (%s)?",
			o.Subject, cfg.Stream, cfg.Consumer)
	}
	// Gather names its package at the start of its errors, which the
	// command's own prefix already does: "throttler top: top: ...".
	return v, errors.New(strings.TrimPrefix(err.Error(), "top: "))
}

// workers says how many workers answered: "1 worker", "3 workers".
func workers(n int) string {
	if n == 1 {
		return "1 worker"
	}
	return strconv.Itoa(n) + " workers"
}

// printTop writes v for people.
func printTop(w io.Writer, v top.View) {
	fmt.Fprintf(w, "throttler top at %s: %s, %d tenants, sorted by jobs waiting\n",
		v.At.Format(time.TimeOnly), workers(v.Workers), v.Tenants)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "TENANT\tADMITTED/S\tDEFERRED/S\tNAK'D\tMOVED\tPARKED\tPAUSED\tOLDEST WAIT\tDLQ 1H\t HELD BY\t")
	for _, r := range v.Rows {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%d\t%d\t%d\t%d\t%s\t%d\t %s\t\n", r.Tenant, r.Admitted, r.Deferred,
			r.Naked, r.Moved, r.Parked, r.Paused, (time.Duration(r.OldestWait * float64(time.Second))).Round(100*time.Millisecond),
			r.DeadLetters, r.Binding)
	}
	_ = tw.Flush()
	if v.More > 0 {
		fmt.Fprintf(w, "… and %d more tenants\n", v.More)
	}
}

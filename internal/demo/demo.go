// Package demo runs the whole throttler on one machine to show what it does:
// an embedded NATS JetStream server, a few workers sharing one Redis, and a
// built-in workload of three tenants (one flooding, one steady, one bursty).
// It prints a live table every second and, at the end, a verdict per tenant
// on whether it was held to its limit.
package demo

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/internal/app"
)

const (
	// defaultRedisURL is used when REDIS_URL is unset.
	defaultRedisURL = "redis://127.0.0.1:6379"
	// maxWorkers caps -workers.
	maxWorkers = 64
	// readyTimeout bounds how long the workers may take to set up.
	readyTimeout = 30 * time.Second
	// finalTimeout bounds reading the consumer after shutdown.
	finalTimeout = 10 * time.Second
)

// Options configures the demo.
type Options struct {
	// Args are the command-line arguments after "demo": -duration (how
	// long the workload publishes, 20s by default) and -workers (how many
	// workers run, 2 by default).
	Args []string
	// Out receives the live table and the verdict. Defaults to io.Discard.
	Out io.Writer
	// Log receives usage messages, the workers' warnings and which
	// servers the demo uses. Defaults to io.Discard.
	Log io.Writer
	// Quiet leaves out the lines saying which servers the demo uses.
	Quiet bool
}

// settings are the demo's command-line flags.
type settings struct {
	duration time.Duration
	workers  int
	// shareRedis runs the demo on a Redis that holds keys it did not
	// write.
	shareRedis bool
	quiet      bool
}

// Run runs the demo: it starts an embedded NATS server, connects to Redis
// at REDIS_URL (redis://127.0.0.1:6379 by default; THROTTLER_REDIS_MODE
// says what it names), runs the workers and
// the workload for -duration, prints a table every second, shuts the
// workers down gracefully and prints the verdict. Cancelling ctx ends the
// demo early; the verdict is still printed. Run returns an error only when
// the demo cannot be set up or a worker fails.
func Run(ctx context.Context, o Options) error {
	out, logw := writerOr(o.Out), writerOr(o.Log)
	fl, err := parseFlags(o.Args, logw)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	fl.quiet = o.Quiet
	ns, err := startNATS()
	if err != nil {
		return err
	}
	err = runWith(ctx, ns.url(), fl, out, logw)
	return errors.Join(err, ns.stop())
}

// writerOr returns w, or io.Discard when w is nil.
func writerOr(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// ErrUsage marks an error of the demo's command line (a flag it does not
// know, a bad value, an argument): the command's status 2.
var ErrUsage = errors.New("bad command line")

// parseFlags reads the demo's flags from args; an error wraps ErrUsage.
func parseFlags(args []string, usage io.Writer) (settings, error) {
	fs := flag.NewFlagSet("throttler demo", flag.ContinueOnError)
	fs.SetOutput(usage)
	var fl settings
	fs.DurationVar(&fl.duration, "duration", 20*time.Second, "how long the workload publishes")
	fs.IntVar(&fl.workers, "workers", 2, "how many workers run, each with its own NATS connection")
	fs.BoolVar(&fl.shareRedis, "share-redis", false, "run even though REDIS_URL holds keys the demo did not write (it adds keys and its function library there)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return fl, err
		}
		return fl, fmt.Errorf("%w: parse flags: %w", ErrUsage, err)
	}
	switch {
	case fs.NArg() > 0:
		return fl, fmt.Errorf("%w: unexpected arguments %q", ErrUsage, fs.Args())
	case fl.duration <= 0:
		return fl, fmt.Errorf("%w: -duration must be more than 0, got %s", ErrUsage, fl.duration)
	case fl.workers < 1 || fl.workers > maxWorkers:
		return fl, fmt.Errorf("%w: -workers must be between 1 and %d, got %d", ErrUsage, maxWorkers, fl.workers)
	}
	return fl, nil
}

// demoVars returns the worker configuration of the demo as variables.
func demoVars(natsURL, redisURL string, now time.Time) map[string]string {
	return map[string]string{
		"NATS_URL":                  natsURL,
		"REDIS_URL":                 redisURL,
		"THROTTLER_KEY_PREFIX":      "demo" + strconv.FormatInt(now.UnixNano(), 36), // unique per run
		"THROTTLER_STREAM":          "DEMO",
		"THROTTLER_SUBJECTS":        "jobs.>",
		"THROTTLER_FORWARD_SUBJECT": "done.{tenant}",
		"THROTTLER_DLQ_SUBJECT":     "dlq.{tenant}",
		"THROTTLER_DEFAULT_LIMIT":   "50/s:5",
		"THROTTLER_TENANT_LIMITS":   "flood=20/s:5,steady=50/s:5,bursty=30/s:30",
		"THROTTLER_MAX_ACK_PENDING": "20000",
		"THROTTLER_CONCURRENCY":     "32",
		"THROTTLER_MAX_DEFER":       "10m",
		"THROTTLER_LOG_LEVEL":       "warn",
	}
}

// newLogger returns a text logger on w at cfg's level. Its clones share one
// lock, so the workers' lines do not interleave.
func newLogger(cfg *app.Settings, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel)) // validated by config
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// session is one run of the demo once the servers are up.
type session struct {
	cfg     *app.Settings
	fl      settings
	out     io.Writer
	log     *slog.Logger
	js      jetstream.JetStream
	tenants []tenant
	rec     *recorder
	fleet   *fleet
}

// runWith configures the worker for the NATS server at natsURL, connects
// to Redis and runs the demo.
func runWith(ctx context.Context, natsURL string, fl settings, out, logw io.Writer) error {
	redisURL := cmp.Or(os.Getenv("REDIS_URL"), defaultRedisURL)
	vars := demoVars(natsURL, redisURL, time.Now())
	vars["THROTTLER_REDIS_MODE"] = os.Getenv("THROTTLER_REDIS_MODE") // empty: single
	cfg, err := app.LoadSettingsFrom(vars)
	if err != nil {
		return fmt.Errorf("demo configuration: %w", err)
	}
	if !fl.quiet {
		origin := "from REDIS_URL"
		if os.Getenv("REDIS_URL") == "" {
			origin = "REDIS_URL is unset: the default"
		}
		fmt.Fprintf(logw, "throttler demo: NATS embedded at %s; Redis %s (%s)\n", natsURL, cfg.MaskedRedisURL(), origin)
	}
	rdb, err := connectRedis(ctx, cfg, fl.workers)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if !fl.shareRedis {
		k, err := foreignKey(ctx, rdb)
		if err != nil {
			return err
		}
		if k != "" {
			return fmt.Errorf("the Redis at %s holds keys the demo did not write (%q, for one), and the demo writes keys and loads its "+
				"function library there; run scripts/demo.sh (a Redis of its own), point REDIS_URL at an empty Redis, or pass -share-redis",
				cfg.MaskedRedisURL(), k)
		}
	}

	pub, err := app.ConnectNATS(cfg.Config, "throttler-demo-publisher")
	if err != nil {
		return fmt.Errorf("connect publisher to NATS: %w", err)
	}
	defer pub.Close()
	js, err := jetstream.New(pub)
	if err != nil {
		return fmt.Errorf("publisher jetstream: %w", err)
	}

	s := &session{cfg: cfg, fl: fl, out: out, log: newLogger(cfg, logw), js: js, rec: newRecorder()}
	s.tenants = workload()
	for i := range s.tenants {
		s.tenants[i].limits = cfg.Rules.Policy(s.tenants[i].name).Limits
	}
	return s.run(ctx, rdb)
}

// run starts the workers, runs the workload, shuts down and reports.
func (s *session) run(ctx context.Context, rdb redis.UniversalClient) error {
	app.WatchRedis(ctx, rdb, s.cfg.MaskedRedisURL(), s.log) // once for the workers sharing it
	f, err := startFleet(ctx, fleetParams{n: s.fl.workers, cfg: s.cfg, rdb: rdb, handler: s.rec.handle, log: s.log})
	if err != nil {
		return err
	}
	s.fleet = f
	if err := s.waitReady(ctx); err != nil {
		return errors.Join(err, f.stop())
	}
	fmt.Fprintf(s.out, "throttler demo: %d workers, embedded NATS at %s, Redis key prefix %s, publishing for %s\n\n",
		s.fl.workers, s.cfg.NATSURL, s.cfg.KeyPrefix, s.fl.duration)
	fmt.Fprint(s.out, legend+"\n")

	start := time.Now()
	pubCtx, stopPublishing := context.WithCancel(ctx)
	defer stopPublishing()
	waitPublishers := publishAll(pubCtx, s.js, s.tenants, s.rec, s.log, s.fl.duration)
	s.watch(ctx, start)

	// Shutdown order: stop publishing, then stop the workers and wait for
	// their graceful shutdown, then read what is left in the consumer.
	stopPublishing()
	waitPublishers()
	stopErr := f.stop()

	now := time.Now()
	rs := rows(s.tenants, s.rec, f, now)
	printTable(s.out, fmt.Sprintf("final, after shutdown (t=%.1fs):", now.Sub(start).Seconds()), rs, now.Sub(start))
	printVerdict(s.out, rs)
	return errors.Join(stopErr, s.account(ctx, rs))
}

// waitReady waits until every worker is built, which means the stream and
// the consumer exist and publishing can start.
func (s *session) waitReady(ctx context.Context) error {
	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	select {
	case <-s.fleet.ready:
		return nil
	case <-s.fleet.exited:
		return errors.New("a worker stopped while starting")
	case <-ctx.Done():
		return nil // the verdict still follows, with nothing published
	case <-timer.C:
		return fmt.Errorf("workers not ready after %s", readyTimeout)
	}
}

// watch prints the table every second until the duration has passed, ctx
// is cancelled or a worker stops.
func (s *session) watch(ctx context.Context, start time.Time) {
	end := time.NewTimer(s.fl.duration)
	defer end.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(s.out, "interrupted; shutting down")
			return
		case <-s.fleet.exited:
			return
		case <-end.C:
			return
		case now := <-tick.C:
			elapsed := now.Sub(start)
			title := fmt.Sprintf("t=%ds of %s:", int(elapsed.Round(time.Second).Seconds()), s.fl.duration)
			printTable(s.out, title, rows(s.tenants, s.rec, s.fleet, now), elapsed)
		}
	}
}

// account checks and prints that every published job was admitted or is
// still pending in the consumer.
func (s *session) account(ctx context.Context, rs []row) error {
	var published, want int64
	for _, r := range rs {
		published += r.v.published
		want += r.v.published - r.v.admitted
	}
	if published == 0 {
		fmt.Fprintln(s.out, "nothing was published")
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalTimeout)
	defer cancel()
	p, err := readPending(rctx, s.js, s.cfg.Stream, s.cfg.Consumer, s.cfg.Schedules, int(want))
	if err != nil {
		return fmt.Errorf("reading what is left in the consumer: %w", err)
	}
	printAccounting(s.out, rs, p)
	return nil
}

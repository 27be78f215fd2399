// Command throttler is a background worker that enforces per-tenant job
// quotas: it pulls jobs from NATS JetStream, asks a Redis token bucket about
// each, runs the admitted ones and defers the rest by exactly their wait.
//
// Usage:
//
//	throttler                run the worker (configured by environment variables)
//	throttler check-config   validate the environment and print the effective configuration
//	throttler demo           run an embedded NATS server, the worker and a three-tenant workload
//	throttler limits ...     set, read, list, remove tenants' limits, and the global and group limits, held in NATS (see limits.go)
//	throttler inspect TENANT why a tenant's jobs wait, from what NATS and Redis hold; --global, --group NAME a level above it (see inspect.go)
//	throttler purge TENANT   remove a tenant's waiting jobs (see purge.go)
//	throttler dlq ...        list, show, replay and purge dead letters (see dlq.go)
//	throttler pub, sub       publish jobs, watch what comes out (see pubsub.go)
//	throttler pause TENANT   stop every worker starting a tenant's jobs; resume TENANT lets them run (see pause.go)
//	throttler credits ...    add, set, read tenants' prepaid balances and their history (see credits.go)
//	throttler top            every tenant at once, from what the workers know (see top.go)
//	throttler version        the version, commit and Go version of the binary
//	throttler help           the commands, the ten variables most set, where the rest are documented
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/config"
	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/internal/demo"
)

// Exit statuses.
const (
	exitOK     = 0
	exitFailed = 1
	exitConfig = 2
)

func main() {
	os.Exit(runProcess(os.Args[1:]))
}

// runProcess runs the command as the process: it sets go-redis' logger,
// which is process-wide (go-redis has no logger per client), then runs
// the subcommand on the process's stdout and stderr. Its default logger
// printed a raw line per failed dial (`redis: ... pool.go:...: redis:
// connection pool: failed to dial ...`) before the command's own error
// that says the same; the logger of the worker's log keeps that line at
// debug, below what the commands print. The worker sets its own once it
// has read its settings.
func runProcess(args []string) int {
	redis.SetLogger(redisLogger{slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	return run(args, os.Stdout, os.Stderr)
}

// run dispatches the subcommand and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	args, quiet := stripQuiet(args)
	sub := ""
	if len(args) > 0 {
		sub = args[0]
	}
	if len(args) > 1 && wantsHelp(args[1:]) {
		if usage, ok := usageOf(sub); ok {
			fmt.Fprintln(stdout, usage)
			return exitOK
		}
	}
	switch sub {
	case "", "run":
		if !noArgs("run", args, stderr) {
			return exitConfig
		}
		return serve(stderr)
	case "check-config":
		if !noArgs(sub, args, stderr) {
			return exitConfig
		}
		return checkConfig(stdout, stderr)
	case "limits":
		return limitsCmd(args[1:], quiet, stdout, stderr)
	case "credits":
		return creditsCmd(args[1:], quiet, stdout, stderr)
	case "pub":
		return pubCmd(args[1:], quiet, stdout, stderr)
	case "sub":
		return subCmd(args[1:], quiet, stdout, stderr)
	case "inspect":
		return inspectCmd(args[1:], quiet, stdout, stderr)
	case "purge":
		return purgeCmd(args[1:], quiet, stdout, stderr)
	case "dlq":
		return dlqCmd(args[1:], quiet, stdout, stderr)
	case "pause":
		return pauseCmd(args[1:], false, quiet, stdout, stderr)
	case "resume":
		return pauseCmd(args[1:], true, quiet, stdout, stderr)
	case "top":
		return topCmd(args[1:], quiet, stdout, stderr)
	case "demo":
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		if err := demo.Run(ctx, demo.Options{Args: args[1:], Out: stdout, Log: stderr, Quiet: quiet}); err != nil {
			fmt.Fprintln(stderr, "throttler demo:", err)
			if errors.Is(err, demo.ErrUsage) {
				return exitConfig
			}
			return exitFailed
		}
		return exitOK
	case "version", "--version":
		if !noArgs("version", args, stderr) {
			return exitConfig
		}
		printVersion(stdout)
		return exitOK
	case "help", "-h", "--help":
		if len(args) > 1 && !wantsHelp(args[1:]) {
			fmt.Fprintf(stderr, "throttler help: takes no arguments, got %q; the commands' own usage: throttler COMMAND -h\n", strings.Join(args[1:], " "))
			return exitConfig
		}
		printHelp(stdout)
		return exitOK
	default:
		fmt.Fprintf(stderr, "throttler: unknown command %q; throttler help lists them\n", sub)
		return exitConfig
	}
}

// usageOf returns the usage of the command sub when -h or --help anywhere
// among its arguments is to answer it before it reads anything: the flag
// would otherwise be taken as a tenant or ignored, and the command would
// connect to the servers. pub, sub and demo answer it themselves.
func usageOf(sub string) (string, bool) {
	switch sub {
	case "run":
		return "usage: throttler [run]   the worker, configured by the environment (throttler help lists the variables most set)", true
	case "check-config":
		return "usage: throttler check-config   reads the environment as the worker does and prints the settings (secrets masked); exit 2 on a bad one", true
	case "limits":
		return limitsUsage, true
	case "inspect":
		return inspectUsage, true
	case "purge":
		return purgeUsage, true
	case "dlq":
		return dlqUsage, true
	case "pause", "resume":
		return pauseUsage, true
	case "credits":
		return creditsUsage, true
	case "top":
		return topUsage, true
	case "version":
		return "usage: throttler version   the module version, commit and Go version", true
	}
	return "", false
}

// noArgs reports whether args (the command line from the command's name
// on) hold nothing after the name; if they do, it says so on stderr with
// the usage of the command name. A command that takes no arguments
// refuses them rather than ignore them: `run --bogus` would otherwise
// start the worker, and `check-config --bogus` say all is well.
func noArgs(name string, args []string, stderr io.Writer) bool {
	if len(args) <= 1 {
		return true
	}
	usage, _ := usageOf(name)
	fmt.Fprintf(stderr, "throttler %s: takes no arguments, got %q\n%s\n", name, strings.Join(args[1:], " "), usage)
	return false
}

// wantsHelp reports whether args hold -h or --help.
func wantsHelp(args []string) bool {
	return slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "--help" })
}

// loadConfig reads the environment, reporting every problem on stderr,
// and warns there of each THROTTLER_ variable the worker does not read.
func loadConfig(stderr io.Writer) (*app.Settings, bool) {
	cfg, ok := loadSettings(stderr)
	if ok {
		for _, p := range config.Unknown(environ()) {
			fmt.Fprintf(stderr, "throttler: warning: %v; it is ignored\n", p)
		}
	}
	return cfg, ok
}

// loadSettings reads the environment, reporting every problem on stderr,
// unknown THROTTLER_ variables among them (a typo often explains another
// problem).
func loadSettings(stderr io.Writer) (*app.Settings, bool) {
	cfg, err := app.LoadSettings()
	if err == nil {
		return cfg, true
	}
	if unknown := config.Unknown(environ()); len(unknown) > 0 {
		err = errors.Join(err, unknown.Err())
	}
	fmt.Fprintf(stderr, "throttler: invalid configuration:\n%v\n", err)
	return nil, false
}

// environ returns the process environment as a map.
func environ() map[string]string {
	vars := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	return vars
}

// checkConfig validates the environment and prints the effective
// configuration with secrets masked. A THROTTLER_ variable the worker does
// not read is a problem here (exit 2): the worker would run without it.
func checkConfig(stdout, stderr io.Writer) int {
	cfg, err := app.LoadSettings()
	if unknown := config.Unknown(environ()); len(unknown) > 0 {
		err = errors.Join(err, unknown.Err())
	}
	if err != nil {
		fmt.Fprintf(stderr, "throttler: invalid configuration:\n%v\n", err)
		return exitConfig
	}
	if err := cfg.Print(stdout); err != nil {
		fmt.Fprintln(stderr, "throttler:", err)
		return exitFailed
	}
	return exitOK
}

// serve runs the worker until SIGTERM or SIGINT, then shuts down gracefully.
func serve(stderr io.Writer) int {
	// Signals first: a SIGTERM that comes while the settings are read
	// stops the worker as one that comes later does, never kills it.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// The whole shutdown, the last flush included, keeps within
	// THROTTLER_SHUTDOWN_TIMEOUT of the signal.
	var stopping atomic.Int64 // UnixNano of the signal
	context.AfterFunc(ctx, func() { stopping.Store(time.Now().UnixNano()) })

	cfg, ok := loadSettings(stderr)
	if !ok {
		return exitConfig
	}
	log := newLogger(cfg, stderr)
	log.Info("using servers", "nats", cfg.MaskedNATSURL(), "nats_from", origin("NATS_URL"),
		"redis", cfg.MaskedRedisURL(), "redis_from", origin("REDIS_URL"))
	// The worker runs without them: said once, in the log's format.
	for _, p := range config.Unknown(environ()) {
		log.Warn("ignoring an unknown variable", "var", p.Var, "problem", p.Text)
	}
	// go-redis logs a few things of its own; route them into the worker's
	// log so that every line has the configured format. go-redis has no
	// logger per client, only this process-wide one, and this is the
	// process. Its line per failed dial, which flooded the log while Redis
	// was down, goes to debug: the worker's watch of its Redis client (a
	// hook on that client, internal/app) logs an outage once instead.
	redis.SetLogger(redisLogger{log})

	// The watch logs an unreachable NATS once with its URL and cause,
	// then a summary every 30 s, and once when it is back.
	watch := app.NewNATSWatch(cfg.Config, log)
	nc, err := app.ConnectNATS(cfg.Config, "throttler", append(watch.Options(), nats.ReconnectWait(time.Second))...)
	if err != nil {
		log.Error("connecting to NATS", "err", err)
		return exitFailed
	}
	defer nc.Close()
	go watch.Run(ctx, nc)

	rdb, err := app.NewRedis(cfg.Config, 1)
	if err != nil { // validated already; kept for safety
		log.Error("redis client", "err", err)
		return exitConfig
	}
	defer rdb.Close()
	// Every command of the client reports to this watch, which logs an
	// outage once, sums it up every 30 s and logs its end.
	app.WatchRedis(ctx, rdb, cfg.MaskedRedisURL(), log)

	if err := app.Run(ctx, cfg, app.Options{NATS: nc, Redis: rdb, Logger: log}); err != nil {
		log.Error("worker stopped", "err", err)
		if errors.Is(err, app.ErrUnsupported) {
			return exitConfig // a setting the server cannot serve
		}
		return exitFailed
	}
	// Flush the last acks and naks before the deferred Close, in what is
	// left of the shutdown timeout. Whatever does not reach the server is
	// redelivered after AckWait: nothing is lost.
	// A connection that is down flushes nothing: waiting for it would hold
	// the exit for the whole shutdown timeout.
	if !nc.IsConnected() {
		log.Info("stopped; NATS was unreachable, so what was not acknowledged is redelivered")
		return exitOK
	}
	if err := nc.FlushTimeout(flushBudget(stopping.Load(), cfg.ShutdownTimeout, time.Now())); err != nil {
		log.Warn("flushing NATS connection", "err", err)
	}
	log.Info("stopped")
	return exitOK
}

// minFlush is the shortest flush of the NATS connection at exit.
const minFlush = 100 * time.Millisecond

// flushBudget is how long the last flush may take: what is left at now of
// timeout after the stop signal (UnixNano; 0 if none came), at least
// minFlush.
func flushBudget(signalled int64, timeout time.Duration, now time.Time) time.Duration {
	if signalled == 0 {
		return max(minFlush, timeout)
	}
	return max(minFlush, time.Unix(0, signalled).Add(timeout).Sub(now))
}

// redisLogger writes go-redis' own messages to the worker's log.
type redisLogger struct{ log *slog.Logger }

// Printf implements go-redis' logger interface.
func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	level := slog.LevelWarn
	if strings.HasPrefix(format, "redis: connection pool: failed to") {
		level = slog.LevelDebug // told once per outage by the Redis watch
	}
	r.log.Log(ctx, level, fmt.Sprintf(format, v...), "source", "go-redis")
}

// newLogger builds the logger THROTTLER_LOG_LEVEL and THROTTLER_LOG_FORMAT ask for.
func newLogger(cfg *app.Settings, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel)) // validated by config
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/internal/ops"
	"github.com/throttler/throttler/throttle"
)

// parseInterleaved parses fs's flags wherever they stand among args, and
// returns the other arguments in order: `purge acme --yes` and
// `purge --yes acme` are the same. Every argument after "--" is one of the
// others, even one that starts with '-': a tenant may ("-x" passes
// tenant.Validate), and without "--" it is refused as an unknown flag.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return rest, nil
		}
		if endedFlags(fs, args) {
			return append(rest, fs.Args()...), nil
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// endedFlags reports whether fs.Parse(args) stopped at a "--" (which it
// drops), rather than at an argument that is not a flag (which it keeps):
// only the first case ends the flags. A "--" that is the value of a flag
// before it (--reason --) ends nothing.
func endedFlags(fs *flag.FlagSet, args []string) bool {
	i := len(args) - fs.NArg() - 1 // the last argument Parse consumed
	if i < 0 || args[i] != "--" {
		return false
	}
	if i == 0 {
		return true
	}
	prev := args[i-1]
	name := strings.TrimPrefix(strings.TrimPrefix(prev, "-"), "-")
	f := fs.Lookup(name)
	if !strings.HasPrefix(prev, "-") || f == nil { // not a flag, or one with its =value
		return true
	}
	b, isBool := f.Value.(interface{ IsBoolFlag() bool })
	return isBool && b.IsBoolFlag()
}

// durationValue is a flag holding a duration: Go's (90s, 2h30m), or a
// whole number of days (7d).
type durationValue struct{ d *time.Duration }

func (v durationValue) String() string {
	if v.d == nil {
		return ""
	}
	return v.d.String()
}

func (v durationValue) Set(s string) error {
	d, err := ops.ParseDuration(s)
	if err != nil {
		return err
	}
	*v.d = d
	return nil
}

// opsSession is what a hands-on command runs with: its settings, a NATS
// connection, and a context cancelled by SIGINT or SIGTERM. It has no
// deadline, as a purge of a large backlog deletes its messages one by
// one: each request to NATS, and each publish's ack, is bounded by
// cliTimeout instead (jetstream applies it to a context without one).
type opsSession struct {
	cfg   *app.Settings
	nc    *nats.Conn
	js    jetstream.JetStream
	fleet ops.Fleet
	ctx   context.Context
	close func()
}

// openOps reads the environment and connects to NATS; status is non-zero
// when that failed (reported on stderr as name). Unless quiet, it says on
// stderr which servers of u the command uses.
func openOps(name string, stderr io.Writer, quiet bool, u uses) (*opsSession, int) {
	cfg, ok := loadConfig(stderr)
	if !ok {
		return nil, exitConfig
	}
	announce(stderr, quiet, cfg.Config, u)
	nc, js, err := connectJetStream(cfg, name, jetstream.WithDefaultTimeout(cliTimeout), jetstream.WithPublishAsyncTimeout(cliTimeout))
	if err != nil {
		fmt.Fprintf(stderr, "throttler %s: %v\n", name, err)
		return nil, exitFailed
	}
	ctx, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	return &opsSession{cfg: cfg, nc: nc, js: js, fleet: cfg.Fleet(js), ctx: ctx, close: func() {
		stopSignals()
		nc.Close()
	}}, exitOK
}

// limiter returns a limiter over the Redis of the session's environment,
// with its key prefix, rules and time zone, and what closes its client.
// An error is the environment's: exit 2.
func (s *opsSession) limiter() (*throttle.Limiter, func(), error) {
	rdb, err := app.NewRedis(s.cfg.Config, 1)
	if err != nil {
		return nil, nil, err
	}
	lim, err := throttle.New(rdb, throttle.Options{Policies: s.cfg.Rules, Prefix: s.cfg.KeyPrefix, TimeZone: s.cfg.Location()})
	if err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	return lim, func() { _ = rdb.Close() }, nil
}

// statusOf is the exit status of an operation's error: 2 for bad input,
// 1 for a server's failure.
func statusOf(err error) int {
	if errors.Is(err, ops.ErrBadInput) {
		return exitConfig
	}
	return exitFailed
}

// streamMissing says, for err of a command that reads the jobs stream,
// that this server has no such stream and what to do, as pub does; ok is
// false for any other error. JetStream's own words ("nats: API error:
// code=404 err_code=10059 description=stream not found") name neither the
// stream nor the cause, most often a server no worker has started on.
func streamMissing(cfg *app.Settings, err error) (msg string, ok bool) {
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return "", false
	}
	return fmt.Sprintf("no stream %s on this server: start the worker first (it creates the stream %s for %s), or run the command with the workers' THROTTLER_STREAM",
		cfg.Stream, cfg.Stream, strings.Join(cfg.Subjects, ",")), true
}

// printJSON writes v as one indented JSON document.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// connectJetStream connects a CLI command to NATS as "throttler-<name>",
// within cliTimeout, and returns its JetStream context; the caller closes
// the connection.
func connectJetStream(cfg *app.Settings, name string, opts ...jetstream.JetStreamOpt) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := app.ConnectNATS(cfg.Config, "throttler-"+name, nats.Timeout(cliTimeout))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc, opts...)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	if on, _ := nc.ConnectedServerJetStream(); !on {
		// The server says it has no JetStream. One that reaches
		// JetStream elsewhere (a leaf node) still answers this; one that
		// cannot is said so now, not as a request nobody answered.
		ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
		_, err := js.AccountInfo(ctx)
		cancel()
		if errors.Is(err, jetstream.ErrJetStreamNotEnabled) {
			err = app.ExplainNoJetStream(nc, err)
			nc.Close()
			return nil, nil, err
		}
	}
	return nc, js, nil
}

// redisUnreachable rewords err when Redis could not be reached (a dial
// refused or timed out, no answer within the timeout), so that an
// operator reads first that Redis, at the URL the command used, is
// unreachable, and then why; any other error is returned as it is.
func redisUnreachable(cfg *app.Settings, err error) error {
	var op *net.OpError
	if !errors.Is(err, throttle.ErrRedis) || !(errors.As(err, &op) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)) {
		return err
	}
	return fmt.Errorf("redis at %s (REDIS_URL) is unreachable: %w", cfg.MaskedRedisURL(), err)
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/testenv"
)

// TestRedisLoggerKeepsTheLogFormat checks that go-redis' own messages come
// out as lines of the worker's log: with THROTTLER_LOG_FORMAT=json, one JSON
// object with the message and its source; its line per failed dial at
// debug level (the Redis watch tells an outage once), the others at warn.
func TestRedisLoggerKeepsTheLogFormat(t *testing.T) {
	for _, tt := range []struct {
		format, msg, level string
	}{
		{"redis: connection pool: failed to dial after %d attempts", "redis: connection pool: failed to dial after 5 attempts", "DEBUG"},
		{"sentinel: %d masters", "sentinel: 5 masters", "WARN"},
	} {
		var buf bytes.Buffer
		l := redisLogger{slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
		l.Printf(context.Background(), tt.format, 5)
		var line map[string]any
		if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
			t.Fatalf("log line %q is not one JSON object: %v", buf.String(), err)
		}
		if line["msg"] != tt.msg || line["source"] != "go-redis" || line["level"] != tt.level {
			t.Errorf("log line %v, want %q at %s with source go-redis", line, tt.msg, tt.level)
		}
	}
}

// TestFlushBudget checks that the last flush keeps the shutdown within
// THROTTLER_SHUTDOWN_TIMEOUT of the signal, with a short floor.
func TestFlushBudget(t *testing.T) {
	sig := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		name      string
		signalled int64
		now       time.Time
		want      time.Duration
	}{
		{"no signal: the whole timeout", 0, sig, 3 * time.Second},
		{"right after the signal", sig.UnixNano(), sig.Add(time.Second), 2 * time.Second},
		{"timeout spent: the floor", sig.UnixNano(), sig.Add(5 * time.Second), minFlush},
	} {
		if got := flushBudget(c.signalled, 3*time.Second, c.now); got != c.want {
			t.Errorf("%s: flushBudget = %s, want %s", c.name, got, c.want)
		}
	}
}

// TestCommandsKeepGoRedisLinesOut: with Redis down, inspect and credits
// say so in their own words alone. Before, go-redis' default logger
// printed a raw line per failed dial ("redis: 2026/12/06 08:39:41
// pool.go:770: redis: connection pool: failed to dial ...") first. The
// logger is the process's, so each command runs as a process of its own.
func TestCommandsKeepGoRedisLinesOut(t *testing.T) {
	s := setup(t)
	s.redis.Stop(t)
	for _, args := range [][]string{{"inspect", "acme"}, {"credits", "get", "acme"}, {"credits", "add", "acme", "5"}} {
		c := startChild(t, append(args, "--quiet")...)
		code := c.wait(t)
		out := c.stderr.String()
		if code != exitFailed || !strings.Contains(out, "throttler "+args[0]+": ") {
			t.Errorf("%v with Redis down: exit %d, want %d with the command's error:\n%s", args, code, exitFailed, out)
		}
		if strings.Contains(out, "pool.go") || strings.Contains(out, "connection pool") {
			t.Errorf("%v with Redis down printed go-redis' own lines:\n%s", args, out)
		}
	}
}

// Pointed at a server started without JetStream (Debian's default), the
// commands that need JetStream say so at once, rather than pass on a
// request nobody answered, or, as pub did, wait out an election.
func TestCommandsSayTheServerHasNoJetStream(t *testing.T) {
	t.Setenv("NATS_URL", testenv.StartNATSWithoutJetStream(t))
	t.Setenv("REDIS_URL", testenv.StartRedis(t).URL())
	for _, args := range [][]string{
		{"pub", "jobs.acme.x", "hi"}, {"inspect", "acme"}, {"limits", "get", "acme"},
		{"pause", "acme"}, {"purge", "acme", "--yes"}, {"dlq", "list"},
	} {
		cli(t, args...).want(t, strings.Join(args, " "), exitFailed, nil, []string{"runs without JetStream: start it with JetStream on"})
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"
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

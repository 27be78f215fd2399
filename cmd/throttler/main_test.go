package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
)

// TestRedisLoggerKeepsTheLogFormat checks that go-redis' own messages come
// out as lines of the worker's log: with THROTTLER_LOG_FORMAT=json, one JSON
// object with the message and its source.
func TestRedisLoggerKeepsTheLogFormat(t *testing.T) {
	var buf bytes.Buffer
	l := redisLogger{slog.New(slog.NewJSONHandler(&buf, nil))}
	l.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts", 5)
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("log line %q is not one JSON object: %v", buf.String(), err)
	}
	if line["msg"] != "redis: connection pool: failed to dial after 5 attempts" || line["source"] != "go-redis" || line["level"] != "WARN" {
		t.Fatalf("log line %v, want the formatted message at WARN with source go-redis", line)
	}
}

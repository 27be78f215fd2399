package integration

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/internal/testenv"
)

// logLines is a slog handler's output, shared by the goroutines logging.
type logLines struct{ testenv.Buffer }

// messages counts the log records by their message.
func (l *logLines) messages() map[string]int {
	out := map[string]int{}
	for _, line := range strings.Split(l.String(), "\n") {
		if _, rest, ok := strings.Cut(line, `msg="`); ok {
			msg, _, _ := strings.Cut(rest, `"`)
			out[msg]++
		}
	}
	return out
}

// runLogged runs a worker with cfg until the test ends, logging at info to
// the returned lines.
func (e *env) runLogged(cfg *app.Settings) *logLines {
	e.t.Helper()
	lines := &logLines{}
	log := slog.New(slog.NewTextHandler(lines, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	nc, rdb := e.connect(), e.redisClient(cfg)
	go func() { done <- app.Run(ctx, cfg, app.Options{NATS: nc, Redis: rdb, Logger: log}) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e.t.Errorf("worker: %v", err)
			}
		case <-time.After(30 * time.Second):
			e.t.Errorf("worker did not stop within 30s")
		}
	})
	return lines
}

// TestJobsAtTheSizeLimitsAreDeadLettered: a job stored at exactly the
// server's max_payload, and one with headers at JetStream's 64 KiB limit,
// cannot be forwarded once the worker adds its headers. Each is a
// permanent failure: it ends in the dead-letter stream at once, cut to fit
// with the reason saying where the original stays, and the other tenants'
// jobs run as usual. A job too large to move is NAK'd instead, and no log
// line repeats more than a few times.
func TestJobsAtTheSizeLimitsAreDeadLettered(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{
		// One big job of tenant m waits for its slot, which schedule moves.
		"THROTTLER_TENANT_LIMITS": "m=1/s:1",
		"THROTTLER_DEFER":         "schedule",
		"THROTTLER_MAX_FAILURES":  "5",
	})
	e.ensureStream(cfg)
	lines := e.runLogged(cfg)
	dlq, done := e.collect("dlq.*"), e.collect("done.*")

	limit := int(e.nc.MaxPayload())
	small := nats.Header{"Kind": {"payload"}}
	hdrBytes := len("NATS/1.0\r\n") + len("Kind: payload\r\n") + len("\r\n")
	atPayload := e.publish("jobs.p", small, bytes.Repeat([]byte("p"), limit-hdrBytes))
	// Headers of 65,535 bytes in all: "NATS/1.0\r\n" + "Big: …\r\n" + "\r\n".
	big := nats.Header{"Big": {strings.Repeat("h", 65535-len("NATS/1.0\r\n")-len("Big: \r\n")-len("\r\n"))}}
	atHeaders := e.publish("jobs.h", big, []byte("h"))
	moved := []uint64{
		e.publish("jobs.m", small, bytes.Repeat([]byte("m"), limit-hdrBytes)),
		e.publish("jobs.m", small, bytes.Repeat([]byte("m"), limit-hdrBytes)),
	}
	ok := e.publishJobs(cfg.Stream, "jobs.c", nil, 20)

	checkExactlyOnce(t, "forwarded", done.waitCount(t, len(ok), 20*time.Second), ok)
	want := map[string]bool{jobID(cfg.Stream, atPayload): true, jobID(cfg.Stream, atHeaders): true}
	for _, seq := range moved {
		want[jobID(cfg.Stream, seq)] = true
	}
	letters := dlq.waitCount(t, len(want), 20*time.Second)
	checkExactlyOnce(t, "dead-lettered", letters, want)
	for _, l := range letters {
		for _, s := range []string{"failed for good", "cut to fit", "stays readable in stream " + cfg.Stream + " at sequence"} {
			if !strings.Contains(l.reason, s) {
				t.Errorf("dead letter of %s: reason %q lacks %q", l.jobID, l.reason, s)
			}
		}
		if l.header.Get(header.Truncated) == "" || l.header.Get(header.DataBytes) == "" {
			t.Errorf("dead letter of %s is not marked as cut: %v", l.jobID, l.header)
		}
		if l.header.Get("Big") != "" {
			t.Errorf("dead letter of %s carries the original's 64 KiB header", l.jobID)
		}
	}
	// The originals stay readable in the jobs stream by their sequence.
	s, err := e.js.Stream(context.Background(), cfg.Stream)
	must(t, err, "stream")
	if m, err := s.GetMsg(context.Background(), atPayload); err != nil || len(m.Data) != limit-hdrBytes {
		t.Errorf("original at %d: %v", atPayload, err)
	}

	msgs := lines.messages()
	if msgs["job too large to move off the consumer; deferred with NAK"] == 0 {
		t.Errorf("no log of the move NAK'd for its size; log messages: %v", msgs)
	}
	for msg, n := range msgs {
		if n > 4 {
			t.Errorf("log line %q repeated %d times", msg, n)
		}
	}
}

package outage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"
)

// clock is a time the test moves.
type clock struct{ t time.Time }

func (c *clock) now() time.Time      { return c.t }
func (c *clock) add(d time.Duration) { c.t = c.t.Add(d) }
func lines(b *bytes.Buffer) []string { return strings.Split(strings.TrimSpace(b.String()), "\n") }
func refused() error                 { return fmt.Errorf("dial tcp 127.0.0.1:1: %w", syscall.ECONNREFUSED) }
func newReporter(b *bytes.Buffer, c *clock) *Reporter {
	log := slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
	return New(Options{Name: "Redis", Attrs: []any{"url", "redis://127.0.0.1:1"}, Log: log, Now: c.now})
}

// TestOutageLogsOnceThenSummarisesThenRecovers follows an outage of 70 s
// with a failure every 10 ms: one line when it begins, one summary per 30 s,
// one line when it ends.
func TestOutageLogsOnceThenSummarisesThenRecovers(t *testing.T) {
	var b bytes.Buffer
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	r := newReporter(&b, c)
	r.OK() // up: nothing to say
	for i := 0; i < 7000; i++ {
		r.Fail(refused())
		c.add(10 * time.Millisecond)
	}
	r.OK()
	r.OK()
	got := lines(&b)
	if len(got) != 4 {
		t.Fatalf("got %d lines, want 4 (failing, two summaries, recovered):\n%s", len(got), b.String())
	}
	for i, want := range []string{
		`level=WARN msg="Redis unreachable" url=redis://127.0.0.1:1 cause="connection refused" err="dial tcp 127.0.0.1:1: connection refused"`,
		`level=WARN msg="Redis still unreachable" url=redis://127.0.0.1:1 cause="connection refused" err="dial tcp 127.0.0.1:1: connection refused" down_for=30s failures=3001`,
		`level=WARN msg="Redis still unreachable" url=redis://127.0.0.1:1 cause="connection refused" err="dial tcp 127.0.0.1:1: connection refused" down_for=1m0s failures=6001`,
		`level=INFO msg="Redis answers again" url=redis://127.0.0.1:1 down_for=1m10s failures=7000`,
	} {
		if got[i] != want {
			t.Errorf("line %d:\n got %s\nwant %s", i, got[i], want)
		}
	}
}

// TestOutageLogsAChangeOfCause logs a new line when the failure changes
// kind, and a summary from Tick when failures stop being reported.
func TestOutageLogsAChangeOfCause(t *testing.T) {
	var b bytes.Buffer
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	r := newReporter(&b, c)
	r.Fail(errors.New("nats: no servers available for connection")) // says nothing yet
	if b.Len() != 0 {
		t.Fatalf("a failure without a cause was logged at once: %s", b.String())
	}
	c.add(time.Second)
	r.Fail(refused())
	r.Fail(refused())
	c.add(time.Second)
	r.Fail(errors.New("nats: Authorization Violation"))
	r.Fail(errors.New("nats: no servers available for connection")) // keeps the known cause
	c.add(29 * time.Second)
	r.Tick()
	c.add(time.Second)
	r.Tick()
	got := lines(&b)
	if len(got) != 3 {
		t.Fatalf("got %d lines, want 3:\n%s", len(got), b.String())
	}
	for i, want := range []string{`cause="connection refused"`, `cause=authentication`, `msg="Redis still unreachable"`} {
		if !strings.Contains(got[i], want) {
			t.Errorf("line %d lacks %s: %s", i, want, got[i])
		}
	}
	if !strings.Contains(got[2], "failures=5") || !strings.Contains(got[2], "down_for=32s") || !strings.Contains(got[2], "cause=authentication") {
		t.Errorf("summary: %s", got[2])
	}
}

// TestOutageWithoutCauseIsLoggedAfterAPeriod logs an outage whose failures
// never name a cause once a summary period has passed.
func TestOutageWithoutCauseIsLoggedAfterAPeriod(t *testing.T) {
	var b bytes.Buffer
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	r := newReporter(&b, c)
	r.Fail(errors.New("no servers available for connection"))
	c.add(29 * time.Second)
	r.Tick()
	if b.Len() != 0 {
		t.Fatalf("logged before a period: %s", b.String())
	}
	c.add(time.Second)
	r.Tick()
	if got := lines(&b); len(got) != 1 || !strings.Contains(got[0], `msg="Redis unreachable"`) || !strings.Contains(got[0], "cause=unknown") {
		t.Fatalf("got %q", got)
	}
}

// TestFailSinceTimesTheOutageFromItsStart: an outage seen only after a
// while is timed from when it began, an outage under way is moved back to
// an earlier start, and a start after now counts as now.
func TestFailSinceTimesTheOutageFromItsStart(t *testing.T) {
	var b bytes.Buffer
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	r := newReporter(&b, c)
	began := c.t
	c.add(4 * time.Second)
	timeout := fmt.Errorf("no answer: %w", context.DeadlineExceeded)
	r.FailSince(timeout, began)
	if down, since := r.Down(); !down || !since.Equal(began) {
		t.Fatalf("Down() = %v, %v; want true, %v", down, since, began)
	}
	c.add(6 * time.Second)
	r.OK()
	got := lines(&b)
	if len(got) != 2 || !strings.Contains(got[0], `msg="Redis unreachable"`) || !strings.Contains(got[0], "cause=timeout") ||
		!strings.Contains(got[1], "down_for=10s failures=1") {
		t.Fatalf("got %q", got)
	}

	b.Reset()
	r.Fail(refused())
	failed := c.t
	r.FailSince(timeout, c.t.Add(-2*time.Second))
	if _, since := r.Down(); !since.Equal(failed.Add(-2 * time.Second)) {
		t.Errorf("an earlier start did not move the outage back: since %v, failed at %v", since, failed)
	}
	r.FailSince(timeout, c.t.Add(-time.Second))
	if _, since := r.Down(); !since.Equal(failed.Add(-2 * time.Second)) {
		t.Errorf("a later start moved the outage: since %v", since)
	}
	r.OK()

	r.FailSince(timeout, c.t.Add(time.Hour))
	if _, since := r.Down(); !since.Equal(c.t) {
		t.Errorf("a start after now: since %v, want now %v", since, c.t)
	}
}

func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want Cause
	}{
		{refused(), CauseRefused},
		{errors.New("nats: Authorization Violation"), CauseAuth},
		{errors.New("WRONGPASS invalid username-password pair or user is disabled"), CauseAuth},
		{errors.New("nats: tls error: tls: failed to verify certificate: x509: certificate signed by unknown authority"), CauseTLS},
		{errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: i/o timeout"), CauseTimeout},
		{errors.New("dial tcp: lookup nosuch.invalid: no such host"), CauseDNS},
		{errors.New("EOF"), CauseClosed},
		{errors.New("nats: no servers available for connection"), CauseUnknown},
	} {
		if got := Classify(tt.err); got != tt.want {
			t.Errorf("Classify(%q) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

// TestOutageBackIsCalledOnceAfterALoggedOutage: Options.Back hears how
// long a logged outage lasted, once, when the dependency answers again.
func TestOutageBackIsCalledOnceAfterALoggedOutage(t *testing.T) {
	var b bytes.Buffer
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	backs := make(chan time.Duration, 4)
	r := newReporter(&b, c)
	r.back = func(d time.Duration) { backs <- d }
	next := func() time.Duration {
		select {
		case d := <-backs:
			return d
		case <-time.After(5 * time.Second):
			t.Fatal("Back was not called after the outage")
			return 0
		}
	}
	r.Fail(refused())
	c.add(12 * time.Second)
	r.OK()
	r.OK()
	if d := next(); d != 12*time.Second {
		t.Fatalf("Back heard %s, want the outage's 12s", d)
	}
	r.Fail(refused()) // a second outage, to show the first called Back once
	c.add(time.Second)
	r.OK()
	if d := next(); d != time.Second {
		t.Fatalf("Back heard %s after the second outage, want 1s (the first outage called it twice?)", d)
	}
}

// Package outage reports a failing dependency (NATS, Redis) in the log
// without flooding it: one line when it starts failing, one when the kind
// of failure changes, a summary every SummaryEvery while it stays down (for
// how long, how many failures), and one line when it recovers.
package outage

import (
	"log/slog"
	"sync"
	"time"
)

// SummaryEvery is how often a Reporter sums up an outage that goes on.
const SummaryEvery = 30 * time.Second

// Options configure a Reporter.
type Options struct {
	// Name names the dependency in every line ("NATS", "Redis"). Required.
	Name string
	// Attrs are logged with every line, as slog key-value pairs: where the
	// dependency is (its URL, passwords masked).
	Attrs []any
	// Log receives the lines. Defaults to slog.Default().
	Log *slog.Logger
	// Now is the clock the outage is timed by. Defaults to time.Now; tests
	// inject one they move, so that no test sleeps through a summary.
	Now func() time.Time
	// Every is how often an outage that goes on is summed up. Defaults to
	// SummaryEvery.
	Every time.Duration
	// Back, if set, is called with how long an outage lasted once the
	// dependency answers again after one that was logged, in a goroutine
	// of its own: the caller can ask what the dependency went through.
	Back func(downFor time.Duration)
}

// Reporter follows one dependency's state from the failures and successes
// its callers see. It is safe for concurrent use.
type Reporter struct {
	name  string
	attrs []any
	log   *slog.Logger
	now   func() time.Time
	every time.Duration
	back  func(downFor time.Duration)

	mu       sync.Mutex
	down     bool
	logged   bool      // the failing line was written for this outage
	since    time.Time // when the outage began
	lastLine time.Time // when this outage was last logged
	failures int       // failures seen in this outage
	cause    Cause     // the kind of the last specific failure
	lastErr  error
}

// New returns a Reporter that sees the dependency up.
func New(o Options) *Reporter {
	r := &Reporter{name: o.Name, attrs: o.Attrs, log: o.Log, now: o.Now, every: o.Every, back: o.Back}
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.every <= 0 {
		r.every = SummaryEvery
	}
	return r
}

// Fail records one failure of the dependency. The first failure of an
// outage is logged, and so is a failure of another kind than the last;
// others are only counted, for the summary. A failure that says nothing of
// its cause (CauseUnknown, such as "no servers available") is logged only
// when no better cause comes within a summary period (see Tick).
func (r *Reporter) Fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail(err, time.Time{})
}

// FailSince records a failure as Fail does, of an outage that began at
// since at the latest. A failure that shows only after a while (calls left
// unanswered until their deadlines, for a period) thus times the outage
// from when it began, and down_for says how long the dependency was gone
// rather than how long it was known to be. An outage under way that began
// later is moved back to since; a since after now counts as now.
func (r *Reporter) FailSince(err error, since time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail(err, since)
}

// fail records a failure of an outage that began at since at the latest
// (zero: now); r.mu must be held.
func (r *Reporter) fail(err error, since time.Time) {
	now := r.now()
	if since.IsZero() || since.After(now) {
		since = now
	}
	switch {
	case !r.down:
		r.down, r.logged, r.since, r.failures, r.cause = true, false, since, 0, CauseUnknown
	case since.Before(r.since):
		r.since = since
	}
	r.failures++
	c := Classify(err)
	if c == CauseUnknown && r.lastErr != nil {
		return // keep the better cause known already
	}
	r.lastErr = err
	switch {
	case c == CauseUnknown:
		return
	case !r.logged:
		r.cause, r.logged, r.lastLine = c, true, now
		r.log.Warn(r.name+" unreachable", r.with("cause", c, "err", err)...)
	case c != r.cause:
		r.cause, r.lastLine = c, now
		r.log.Warn(r.name+" still unreachable, for another cause", r.with("cause", c, "err", err,
			"down_for", r.downFor(now), "failures", r.failures)...)
	default:
		r.summarize(now)
	}
}

// OK records that the dependency answered. After an outage it logs one
// line saying how long it lasted and how many failures it held, and
// calls Options.Back.
func (r *Reporter) OK() {
	r.mu.Lock()
	if !r.down {
		r.mu.Unlock()
		return
	}
	logged, downFor := r.logged, r.downFor(r.now())
	if logged {
		r.log.Info(r.name+" answers again", r.with("down_for", downFor, "failures", r.failures)...)
	}
	r.down, r.logged, r.lastErr = false, false, nil
	r.mu.Unlock()
	if logged && r.back != nil {
		go r.back(downFor)
	}
}

// Down reports whether the dependency is failing, and since when.
func (r *Reporter) Down() (bool, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.down, r.since
}

// Tick writes the summary of an outage that has gone on for a summary
// period since its last line, so that an outage whose failures stopped
// being reported (a client that gave up telling) is still summed up.
// Callers tick it about once a second (Run).
func (r *Reporter) Tick() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.down {
		return
	}
	now := r.now()
	if !r.logged {
		if now.Sub(r.since) >= r.every {
			r.logged, r.lastLine = true, now
			r.log.Warn(r.name+" unreachable", r.with("cause", r.cause, "err", r.lastErr,
				"down_for", r.downFor(now), "failures", r.failures)...)
		}
		return
	}
	r.summarize(now)
}

// summarize logs the summary when a period has passed since the last line.
func (r *Reporter) summarize(now time.Time) {
	if !r.logged || now.Sub(r.lastLine) < r.every {
		return
	}
	r.lastLine = now
	r.log.Warn(r.name+" still unreachable", r.with("cause", r.cause, "err", r.lastErr,
		"down_for", r.downFor(now), "failures", r.failures)...)
}

// downFor is how long the outage has lasted at now, rounded for reading.
func (r *Reporter) downFor(now time.Time) time.Duration {
	return now.Sub(r.since).Round(time.Millisecond)
}

// with is the reporter's attributes followed by kv.
func (r *Reporter) with(kv ...any) []any {
	return append(append(make([]any, 0, len(r.attrs)+len(kv)), r.attrs...), kv...)
}

// Cause is the kind of the failure last logged, CauseUnknown if none.
func (r *Reporter) Cause() Cause {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cause
}

// Package header names the headers the worker reads and writes on a job's
// messages (its moved copies, bundles, forwards and dead letters), the
// reasons it writes when a job waits off the consumer, and reads a job's
// cost. The worker, the fast lane and the operator's commands (pause,
// credits, purge, replay) speak this one vocabulary, so that each can find
// what the others wrote; none of them needs the worker for it. Because
// the worker adds these headers to what it publishes, a message may come
// out larger than the job it carries: Fits checks it against the server's
// limits (fit.go).
package header

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/throttler/throttler/throttle"
)

// Headers set on a moved or dead-lettered job let it keep its identity
// across streams and subjects.
const (
	// JobID carries a job's identity, "<stream>:<sequence>" of its first
	// delivery. Reservations, failure counts and deduplication use it.
	JobID = "Throttler-Job-Id"
	// Deferrals carries how many times the throttle has deferred a moved
	// job.
	Deferrals = "Throttler-Deferrals"
	// Published carries the original publish time of a moved job, RFC 3339
	// with nanoseconds.
	Published = "Throttler-Published"
	// Bundle marks a scheduled message carrying several moved jobs'
	// copies; its value is how many.
	Bundle = "Throttler-Bundle"
	// Slot carries the slot a moved job was scheduled for, in µs since the
	// Unix epoch.
	Slot = "Throttler-Slot"
	// Subject carries a moved or dead-lettered job's original subject.
	Subject = "Throttler-Subject"
	// Tenant carries the tenant of a forwarded or dead-lettered job.
	Tenant = "Throttler-Tenant"
	// Reason says why a job was dead-lettered.
	Reason = "Throttler-Reason"
	// Failures carries the handler failures of a dead-lettered job.
	Failures = "Throttler-Failures"
	// WaitReason says why a moved job waits: "limit 20/s:40", the limit
	// that held it, a handler failure awaiting its retry, or one of the
	// Wait reasons below.
	WaitReason = "Throttler-Wait-Reason"
	// WaitUntil carries when a moved job may run, RFC 3339 in UTC, for an
	// operator reading a moved copy; the worker reads it to count a woken
	// job off those waiting.
	WaitUntil = "Throttler-Wait-Until"
	// Woken marks a job brought back in its turn under a running cap:
	// delivered by the consumer of woken jobs, not the jobs consumer.
	Woken = "Throttler-Woken"
	// ReplayedFrom marks a job published again from a dead letter
	// (throttler dlq replay): "<dead-letter stream>:<sequence>".
	ReplayedFrom = "Throttler-Replayed-From"
	// Released marks a paused job a resume brought back, with the time it
	// did (RFC 3339): such a job is decided even while the pause it was
	// released from is still stored, so that a resume can bring a
	// tenant's paused jobs back, in order, before it lets new ones
	// through. A pause that began later holds it again.
	Released = "Throttler-Released"
	// DataBytes carries the size of the original's data, when a dead
	// letter does not carry all of it.
	DataBytes = "Throttler-Data-Bytes"
	// Truncated says a dead letter carries only the first N bytes of the
	// original's data ("N of M bytes") and none of its own headers.
	Truncated = "Throttler-Truncated"
)

// OwnPrefix starts the name of every header the worker sets on the
// messages it makes (copies, bundles, forwards, dead letters): a job
// replayed from a dead letter leaves them behind.
const OwnPrefix = "Throttler-"

// The WaitReason of a job parked off the consumer until something other
// than time lets it run: each is written on such jobs' copies and no
// others, so that the operator's command or the worker that ends the wait
// finds exactly those copies by it.
const (
	// WaitPaused is the reason of a job whose tenant is paused; a resume
	// brings them back.
	WaitPaused = "paused"
	// WaitCredits is the reason of a job its tenant's credits could not
	// cover; a top-up (throttler credits add or set) brings them back in
	// order.
	WaitCredits = "waiting for credits"
	// WaitLease starts the reason of a job parked for a lease under a
	// running cap, followed by the cap: what tells a parked copy from a
	// moved one.
	WaitLease = "waiting for a lease under "
	// WaitTurn starts the reason of a job parked for its turn under a
	// shared level, followed by the level's name.
	WaitTurn = "waiting for a turn under "
)

// The WaitReason of a job moved to wait for a slot under its tenant's own
// limits: such a job comes back at its slot by itself, or at once when
// those limits change (throttler limits set, release.Moved).
const (
	// WaitLimit starts the reason of a job given a slot under its
	// tenant's limits, followed by the limit whose bucket set its wait.
	WaitLimit = "limit "
	// WaitSlot is the reason of a job back before the slot it holds.
	WaitSlot = "the slot it holds"
)

// ParseCost reads a job's cost from the header name: absent means 1;
// otherwise a decimal whole number in [1, throttle.MaxBurst].
func ParseCost(h nats.Header, name string) (int64, error) {
	vals := h.Values(name)
	if len(vals) == 0 {
		return 1, nil
	}
	if len(vals) > 1 {
		return 0, fmt.Errorf("malformed cost: %d %s headers", len(vals), name)
	}
	v := vals[0]
	if v == "" || len(v) > 10 || strings.TrimLeft(v, "0123456789") != "" {
		return 0, fmt.Errorf("malformed cost %q: want a whole number from 1 to %d", v, throttle.MaxBurst)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 || n > throttle.MaxBurst {
		return 0, fmt.Errorf("malformed cost %q: want a whole number from 1 to %d", v, throttle.MaxBurst)
	}
	return n, nil
}

package consumer

import (
	"context"
	"errors"
	"time"
)

// RetryAfter, returned by a Handler (as *RetryAfter, possibly wrapped),
// says the job's destination asked the worker to wait until Until before
// sending it, or anything else of its tenant (HTTP 429, or 503 with
// Retry-After). It is not a failure of the job: the job is deferred until
// then, uncounted, with the reason "downstream asked to wait until …"; and,
// with a Holder, the tenant is held back fleet-wide until then, so no
// worker starts another of its jobs. Until is capped at Config.MaxHold.
type RetryAfter struct {
	// Until is when the destination takes jobs again.
	Until time.Time
	// After, when Until is zero, is how long from now (the worker's clock)
	// the destination takes jobs again: for a handler that knows a wait
	// but not the time.
	After time.Duration
	// Reason says what the destination answered, for the logs and the
	// deferred copy's Throttler-Wait-Reason.
	Reason string
}

// Error says when the destination takes jobs again, and why.
func (e *RetryAfter) Error() string {
	s := "downstream asked to wait until " + e.Until.UTC().Format(time.RFC3339Nano)
	if e.Until.IsZero() {
		s = "downstream asked to wait " + e.After.String()
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Holder holds a tenant back fleet-wide while its downstream asks the
// worker to wait, and gives up the owner record of the job that was told
// to wait, so that its deferred copy may run; *throttle.Holds satisfies
// it.
type Holder interface {
	// Hold makes the tenant's buckets empty until until at the earliest,
	// and gives the job told to wait, jobID, the first slot after: decided
	// again then, it runs ahead of the jobs that arrived meanwhile.
	Hold(ctx context.Context, tenant, jobID string, until time.Time) error
	// Release deletes the job's owner record if it names incarnation.
	Release(ctx context.Context, tenant, jobID string, incarnation int64) (bool, error)
}

// asRetryAfter returns the RetryAfter err is or wraps, or nil.
func asRetryAfter(err error) *RetryAfter {
	var ra *RetryAfter
	if errors.As(err, &ra) && ra != nil {
		return ra
	}
	return nil
}

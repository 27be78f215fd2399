package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/fastlane/fastcopy"
	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/tenant"
)

// Job is one message handed to a Handler.
type Job struct {
	// ID is the job's identity: "<stream>:<sequence>" of its first delivery,
	// kept when the job is moved.
	ID string
	// Tenant owns the job.
	Tenant string
	// Group is the job's group, the level above its tenant whose limit
	// it shares (throttle.Level), read where Config.Group says; "" when
	// the job has none.
	Group string
	// Subject is the subject the job was published to.
	Subject string
	// Data is the message body.
	Data []byte
	// Header is the message's headers. Handlers must not modify it.
	Header nats.Header
	// Cost is the number of tokens the job takes; 1 unless the cost header
	// says otherwise.
	Cost int64
	// Stream and Sequence locate the message as delivered now.
	Stream   string
	Sequence uint64
	// Delivered is how many times this message has been delivered.
	Delivered uint64
	// Deferrals is how many times the throttle deferred the job before it
	// was moved off the consumer (0 for a job never moved).
	Deferrals int
	// Published is when the job was first published.
	Published time.Time
}

// OriginalSequence is the stream sequence in the job's ID
// ("STREAM:SEQUENCE"), that of its first delivery, which every copy of the
// job keeps; Sequence when the ID holds none.
func (j Job) OriginalSequence() uint64 {
	if i := strings.LastIndexByte(j.ID, ':'); i >= 0 {
		if n, err := strconv.ParseUint(j.ID[i+1:], 10, 64); err == nil {
			return n
		}
	}
	return j.Sequence
}

// An incarnation is one message carrying a job: the original, each copy
// made by moving it, the lane's copy. The throttle records which
// incarnation of a job ran (its owner), so that only one of them runs when
// a move is interrupted between storing the copy and acking the original.

// incarnation is the incarnation of the message carrying job: its stream
// sequence as delivered, unique to the original and to every copy, even two
// copies of one move. A fast copy is the exception: its incarnation is fixed
// by the original's sequence (package fastcopy states the rule), so that the
// lane can claim the job for it before it is stored.
func incarnation(job Job) int64 {
	if job.Header.Get(fastcopy.Header) != "" {
		return fastcopy.Incarnation(job.OriginalSequence())
	}
	return fastcopy.Ordinary(job.Sequence)
}

// Handler runs an admitted job. A nil error acks the job; an error is a
// failure of that job, retried with backoff and dead-lettered after
// Config.MaxFailures failures (at once when it is Permanent); a
// *RetryAfter is no failure: the job waits, its tenant held. A panic
// counts as an error. The context is cancelled when the worker stops and
// the shutdown timeout has passed.
type Handler func(ctx context.Context, job Job) error

// Permanent marks err, returned by a Handler, as a failure that retrying
// cannot fix (the job is malformed for its destination, too large, refused
// for good): the job is dead-lettered at once, with err in the reason,
// instead of being retried MaxFailures times.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or an error it wraps, was marked by
// Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// permanentError is an error marked by Permanent.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// badJobError says why a message cannot be a job; such a message goes to
// the dead-letter subject.
type badJobError struct {
	tenant string // the tenant when it was valid, else ""
	reason string
}

func (e *badJobError) Error() string { return e.reason }

// readJob builds the Job of a delivered message, reading its tenant,
// group and cost where cfg says.
func readJob(msg jetstream.Msg, cfg Config) (Job, error) {
	meta, err := msg.Metadata()
	if err != nil {
		return Job{}, fmt.Errorf("message metadata: %w", err)
	}
	h := msg.Headers()
	job := Job{
		Subject:   msg.Subject(),
		Data:      msg.Data(),
		Header:    h,
		Stream:    meta.Stream,
		Sequence:  meta.Sequence.Stream,
		Delivered: meta.NumDelivered,
		Published: meta.Timestamp,
		ID:        meta.Stream + ":" + strconv.FormatUint(meta.Sequence.Stream, 10),
	}
	if id := h.Get(header.JobID); id != "" {
		job.ID = id
		if subj := h.Get(header.Subject); subj != "" {
			job.Subject = subj
		}
		job.Deferrals, _ = strconv.Atoi(h.Get(header.Deferrals))
		if ts, err := time.Parse(time.RFC3339Nano, h.Get(header.Published)); err == nil {
			job.Published = ts
		}
	}
	t, err := cfg.Tenant.Of(job.Subject, h)
	if err != nil {
		return job, &badJobError{reason: err.Error()}
	}
	job.Tenant = t
	if job.Group, err = readGroup(job.Subject, h, cfg); err != nil {
		return job, &badJobError{tenant: t, reason: err.Error()}
	}
	cost, err := header.ParseCost(h, cfg.CostHeader)
	if err != nil {
		return job, &badJobError{tenant: t, reason: err.Error()}
	}
	job.Cost = cost
	return job, nil
}

// readGroup returns the group of a message published to subject with
// headers h, where cfg.Group says: "" when cfg names no source, or when
// the message carries no group and cfg.GroupRequired is not set. A
// malformed group is an error, as a malformed tenant is: the job would
// otherwise escape its group's limit.
func readGroup(subject string, h nats.Header, cfg Config) (string, error) {
	if cfg.Group == (tenant.Source{}) {
		return "", nil
	}
	g, err := cfg.Group.GroupOf(subject, h)
	if errors.Is(err, tenant.ErrMissing) && !cfg.GroupRequired {
		return "", nil
	}
	return g, err
}

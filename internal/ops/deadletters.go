package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/tenant"
)

// DeadLetter is one job the workers dead-lettered, as stored in the
// dead-letter stream.
type DeadLetter struct {
	// ID is the dead letter's sequence in Stream.
	ID     uint64 `json:"id"`
	Stream string `json:"stream"`
	// Tenant is the job's tenant; tenant.Invalid for a job without a
	// valid one.
	Tenant string `json:"tenant"`
	// Reason says why the job was dead-lettered.
	Reason string `json:"reason"`
	// Failures counts the handler's failures; 0 for a job that never ran.
	Failures int64 `json:"failures"`
	// Time is when it was dead-lettered.
	Time time.Time `json:"time"`
	// Size is the size of the data it carries.
	Size int `json:"size"`
	// JobID is the job's id ("<stream>:<sequence>" of its first delivery).
	JobID string `json:"job_id,omitempty"`
	// Subject is the job's original subject, where a replay publishes it;
	// "" when the dead letter does not say (not made by a worker).
	Subject string `json:"subject,omitempty"`
	// Truncated says the dead letter was cut to fit ("N of M bytes"): it
	// lacks the job's headers and part of its data, and is not replayed.
	Truncated string `json:"truncated,omitempty"`
	// Header and Data are filled by ShowDeadLetter only: every header, and
	// the first bytes of the data (DataCut says how many more there are).
	Header  nats.Header `json:"headers,omitempty"`
	Data    []byte      `json:"data,omitempty"`
	DataCut int         `json:"data_cut,omitempty"`
}

// DeadLetterFilter selects dead letters; its zero value selects all.
type DeadLetterFilter struct {
	// Tenant, when set, selects the tenant's (tenant.Invalid: those of
	// jobs without a valid tenant).
	Tenant string
	// Reason, when set, selects those whose reason contains it, in any
	// case.
	Reason string
	// Since, when set, selects those dead-lettered at or after it.
	Since time.Time
	// Limit, when positive, selects at most that many, the oldest first.
	Limit int
	// IDs, when set, selects only these dead letters (the console's
	// selection), the other fields narrowing them further.
	IDs []uint64
}

// Validate checks the filter.
func (f DeadLetterFilter) Validate() error {
	if f.Tenant != "" && f.Tenant != tenant.Invalid {
		if err := tenant.Validate(f.Tenant); err != nil {
			return fmt.Errorf("%w: tenant: %w", ErrBadInput, err)
		}
	}
	if f.Limit < 0 {
		return fmt.Errorf("%w: limit %d is negative", ErrBadInput, f.Limit)
	}
	return nil
}

// match reports whether d passes the filter (all but Limit).
func (f DeadLetterFilter) match(d DeadLetter) bool {
	if f.Tenant != "" && d.Tenant != f.Tenant {
		return false
	}
	if f.Reason != "" && !strings.Contains(strings.ToLower(d.Reason), strings.ToLower(f.Reason)) {
		return false
	}
	if len(f.IDs) > 0 && !slices.Contains(f.IDs, d.ID) {
		return false
	}
	return f.Since.IsZero() || !d.Time.Before(f.Since)
}

// ListDeadLetters returns the dead letters f selects, oldest first,
// without their headers and data. No dead-letter stream is no error: the
// list is empty.
func ListDeadLetters(ctx context.Context, fl Fleet, f DeadLetterFilter) ([]DeadLetter, error) {
	out := []DeadLetter{}
	err := eachDeadLetter(ctx, fl, f, true, func(d DeadLetter, _ stored) (bool, error) {
		out = append(out, d)
		return true, nil
	})
	return out, err
}

// ShowDeadLetter returns the dead letter id, with its headers and the
// first maxData bytes of its data (all when maxData is negative). A dead
// letter that does not exist is ErrNotFound.
func ShowDeadLetter(ctx context.Context, fl Fleet, id uint64, maxData int) (DeadLetter, error) {
	s, err := fl.dlqStream(ctx)
	if err != nil {
		return DeadLetter{}, err
	}
	if s == nil {
		return DeadLetter{}, fmt.Errorf("dead letter %d: %w (no stream stores %s)", id, ErrNotFound, fl.DLQ.Pattern())
	}
	m, err := s.GetMsg(ctx, id)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return DeadLetter{}, fmt.Errorf("dead letter %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return DeadLetter{}, fmt.Errorf("reading dead letter %d: %w", id, err)
	}
	st := stored{Seq: m.Sequence, Subject: m.Subject, Header: m.Header, Data: m.Data, Size: len(m.Data), Time: m.Time}
	if !fl.isDeadLetter(st.Subject) {
		return DeadLetter{}, fmt.Errorf("message %d: %w (its subject %s is not a dead-letter subject)", id, ErrNotFound, st.Subject)
	}
	d := deadLetterOf(s.CachedInfo().Config.Name, st)
	d.Header = m.Header
	d.Data = m.Data
	if maxData >= 0 && len(d.Data) > maxData {
		d.Data, d.DataCut = d.Data[:maxData], len(d.Data)-maxData
	}
	return d, nil
}

// eachDeadLetter calls fn with each dead letter f selects, oldest first, at
// most f.Limit, until fn returns false.
func eachDeadLetter(ctx context.Context, fl Fleet, f DeadLetterFilter, headersOnly bool, fn func(DeadLetter, stored) (bool, error)) error {
	if err := f.Validate(); err != nil {
		return err
	}
	s, err := fl.dlqStream(ctx)
	if err != nil || s == nil {
		return err
	}
	name := s.CachedInfo().Config.Name
	filter := fl.DLQ.Pattern()
	if f.Tenant != "" && filter != fl.DLQ.Render(f.Tenant) {
		filter = fl.DLQ.Render(f.Tenant) // a tenant's dead letters have a subject of their own
	}
	n := 0
	return scan(ctx, s, scanOptions{Filters: []string{filter}, Since: f.Since, HeadersOnly: headersOnly}, func(st stored) (bool, error) {
		d := deadLetterOf(name, st)
		if !f.match(d) {
			return true, nil
		}
		n++
		more, err := fn(d, st)
		return more && (f.Limit <= 0 || n < f.Limit), err
	})
}

// isDeadLetter reports whether subj is a dead-letter subject.
func (fl Fleet) isDeadLetter(subj string) bool {
	pat := strings.Split(fl.DLQ.Pattern(), ".")
	toks := strings.Split(subj, ".")
	if len(pat) != len(toks) {
		return false
	}
	for i := range pat {
		if pat[i] != "*" && pat[i] != toks[i] {
			return false
		}
	}
	return true
}

// deadLetterOf reads a dead letter's fields from its headers.
func deadLetterOf(stream string, st stored) DeadLetter {
	h := st.Header
	d := DeadLetter{
		ID: st.Seq, Stream: stream, Time: st.Time.UTC(), Size: st.Size,
		Tenant:    h.Get(header.Tenant),
		Reason:    h.Get(header.Reason),
		JobID:     h.Get(header.JobID),
		Subject:   h.Get(header.Subject),
		Truncated: h.Get(header.Truncated),
	}
	if d.Tenant == "" {
		d.Tenant = tenant.Invalid
	}
	d.Failures, _ = strconv.ParseInt(h.Get(header.Failures), 10, 64)
	return d
}

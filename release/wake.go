package release

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/subject"
)

// WokenMsg is the message that brings back at once the parked copy of
// job jobID (first stored at sequence seq) of tenant, whose headers h and
// data are given: it goes past the jobs consumer's backlog, on the woken
// jobs' subject (the job's own subject is in its header.Subject), as a new
// incarnation. Its message id makes one publish per parked copy, however
// many wakers call for it.
func WokenMsg(subjects subject.Schedules, tenant, jobID string, seq uint64, h nats.Header, data []byte) *nats.Msg {
	out := &nats.Msg{Subject: subjects.Woken(tenant, seq), Data: data, Header: nats.Header{}}
	header.Copy(out.Header, h)
	out.Header.Del(header.Slot)
	out.Header.Set(header.Woken, "1")
	out.Header.Set(jetstream.MsgIDHeader, "wake:"+jobID+":"+h.Get(header.Deferrals))
	return out
}

// Waker wakes one job a worker parked to wait for its turn under a running
// cap (consumer.Deferral.Park), when the turn comes: it reads the job's
// parked copy, the last message on its copy subject (Schedules.Copy of its
// tenant and original sequence), publishes it at once on Schedules.Woken
// (WokenMsg; the workers pull it past the jobs consumer's backlog), and
// deletes the parked copy.
// The job then comes back to the jobs consumer as a new incarnation, so
// that a parked copy left by a failed delete, firing later, is found to be
// a duplicate. Safe for concurrent use.
type Waker struct {
	// JetStream reads, publishes and deletes the copies. Required.
	JetStream jetstream.JetStream
	// Subjects names the copies' subjects, as the worker's deferrer does.
	// Required.
	Subjects subject.Schedules

	streams sync.Map // stream name → jetstream.Stream
}

// wakeRetries are the pauses before the reads of a parked copy after the
// first: a job called the moment it was parked may not be stored yet.
var wakeRetries = []time.Duration{20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}

// Wake brings back job jobID of tenant if it is parked, and reports
// whether it was; a job id the worker does not give, or a job with no
// parked copy (yet: it is read again a few times over 370 ms, since a job
// called the moment it was parked may not be stored yet), was not. It
// implements consumer.Waker.
func (s *Waker) Wake(ctx context.Context, tenant, jobID string) (bool, error) {
	name, seqText, ok := strings.Cut(jobID, ":")
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if !ok || err != nil {
		return false, nil // not a job id the worker gives: never parked
	}
	st, err := s.stream(ctx, name)
	if err != nil {
		return false, err
	}
	subj := s.Subjects.Copy(tenant, seq)
	var raw *jetstream.RawStreamMsg
	for i := 0; ; i++ {
		raw, err = st.GetLastMsgForSubject(ctx, subj)
		if err == nil {
			break
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return false, fmt.Errorf("reading the parked copy of job %s: %w", jobID, err)
		}
		if i == len(wakeRetries) {
			return false, nil
		}
		select {
		case <-time.After(wakeRetries[i]):
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	if raw.Header.Get(jetstream.ScheduleTargetHeader) == "" {
		return false, nil // not a parked copy
	}
	out := WokenMsg(s.Subjects, tenant, jobID, seq, raw.Header, raw.Data)
	if _, err := s.JetStream.PublishMsg(ctx, out); err != nil {
		return false, fmt.Errorf("publishing woken job %s: %w", jobID, err)
	}
	if err := st.DeleteMsg(ctx, raw.Sequence); err != nil && !gone(err) {
		// The copy fires at its fallback time and is then a duplicate of
		// the woken job, which runs first.
		return true, fmt.Errorf("deleting the parked copy of woken job %s: %w", jobID, err)
	}
	return true, nil
}

// gone reports whether a delete failed because the message is no longer
// there: another waker took it first, or its schedule fired.
func gone(err error) bool {
	return errors.Is(err, jetstream.ErrMsgNotFound) ||
		errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) && strings.Contains(err.Error(), "not found")
}

// stream returns the named stream, looked up once.
func (s *Waker) stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if st, ok := s.streams.Load(name); ok {
		return st.(jetstream.Stream), nil
	}
	st, err := s.JetStream.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	s.streams.Store(name, st)
	return st, nil
}

package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/release"
	"github.com/throttler/throttler/subject"
)

// StreamWaker wakes jobs that a ScheduleDeferrer parked (Deferral.Park):
// it reads the job's parked copy, the last message on its copy subject
// (Schedules.Copy of its tenant and original sequence), publishes it at
// once on Schedules.Woken (read by Params.Woken), and deletes the parked
// copy.
// The job then comes back to the jobs consumer as a new incarnation, so
// that a parked copy left by a failed delete, firing later, is found to be
// a duplicate. Safe for concurrent use.
type StreamWaker struct {
	// JetStream reads, publishes and deletes the copies. Required.
	JetStream jetstream.JetStream
	// Subjects names the copies' subjects, as the ScheduleDeferrer's.
	// Required.
	Subjects subject.Schedules

	streams sync.Map // stream name → jetstream.Stream
}

// wakeRetries are the pauses before the reads of a parked copy after the
// first: a job called the moment it was parked may not be stored yet.
var wakeRetries = []time.Duration{20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}

// Wake implements Waker.
func (s *StreamWaker) Wake(ctx context.Context, tenant, jobID string) (bool, error) {
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
	out := release.WokenMsg(s.Subjects, tenant, jobID, seq, raw.Header, raw.Data)
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
func (s *StreamWaker) stream(ctx context.Context, name string) (jetstream.Stream, error) {
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

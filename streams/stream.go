package streams

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/subject"
)

// StreamSpec describes the jobs stream the worker reads.
type StreamSpec struct {
	// Name is the stream's name.
	Name string
	// Subjects are the job subjects the stream binds.
	Subjects []string
	// ScheduleSubjects, when not empty, are extra subjects (e.g. "sched.>")
	// the stream must bind for moved jobs, and the stream must allow message
	// schedules.
	ScheduleSubjects []string
	// AllowDirect, when set, creates a missing stream with direct gets on,
	// the fast lane's quickest read of a message. An existing stream is
	// left as it is.
	AllowDirect bool
	// MaxAge, when positive, is the max age of a stream EnsureStream
	// creates. An existing stream is left as it is.
	MaxAge time.Duration
	// Replicas is the replicas of a stream EnsureStream creates, at least
	// 1 (a clustered server keeps that many copies). An existing stream is
	// left as it is.
	Replicas int
}

// EnsureStream returns the jobs stream, creating it if missing. A stream
// that exists without some of spec's job subjects (none of its subjects
// covers them) gets them added. When spec asks for schedules and the
// stream exists without them, it adds the schedule subjects and turns
// schedules on; the error then says why that failed, and the caller can
// fall back to NAK-only deferral.
func EnsureStream(ctx context.Context, js jetstream.JetStream, spec StreamSpec) (jetstream.Stream, error) {
	want := jetstream.StreamConfig{
		Name:              spec.Name,
		Subjects:          append(slices.Clone(spec.Subjects), spec.ScheduleSubjects...),
		Storage:           jetstream.FileStorage,
		Retention:         jetstream.LimitsPolicy,
		AllowMsgSchedules: len(spec.ScheduleSubjects) > 0,
		AllowDirect:       spec.AllowDirect,
		MaxAge:            spec.MaxAge,
		Replicas:          max(1, spec.Replicas),
	}
	s, err := js.Stream(ctx, spec.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = js.CreateStream(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			s, err = js.Stream(ctx, spec.Name) // another worker created it first
		}
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", spec.Name, err)
	}
	cfg := s.CachedInfo().Config
	var changes []string // what the update does, for its error
	for _, subj := range spec.Subjects {
		if !slices.ContainsFunc(cfg.Subjects, func(bound string) bool { return subject.Covers(bound, subj) }) {
			cfg.Subjects = append(cfg.Subjects, subj)
			changes = append(changes, "binding "+subj)
		}
	}
	if len(spec.ScheduleSubjects) > 0 {
		enable := !cfg.AllowMsgSchedules
		for _, subj := range spec.ScheduleSubjects {
			if !slices.Contains(cfg.Subjects, subj) {
				cfg.Subjects = append(cfg.Subjects, subj)
				enable = true
			}
		}
		if enable {
			cfg.AllowMsgSchedules = true
			changes = append(changes, "enabling message schedules")
		}
	}
	if len(changes) == 0 {
		return s, nil
	}
	us, err := js.UpdateStream(ctx, cfg)
	if err != nil {
		return s, fmt.Errorf("stream %s: %s: %w", spec.Name, strings.Join(changes, " and "), err)
	}
	return us, nil
}

// Unbounded reports whether a stream keeps every message it stores for
// ever: limits retention with no max age, bytes or messages. Work-queue
// and interest streams drop what their consumers have acked.
func Unbounded(c jetstream.StreamConfig) bool {
	return c.Retention == jetstream.LimitsPolicy && c.MaxAge <= 0 && c.MaxBytes <= 0 && c.MaxMsgs <= 0 && c.MaxMsgsPerSubject <= 0
}

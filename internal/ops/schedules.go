// Package ops holds the operators' operations on a running fleet, over what
// the servers hold: questions that only read (the moved jobs waiting), and
// the hands-on commands (purging a tenant's waiting jobs, listing, replaying
// and purging dead letters). Each takes a context and options and returns
// a plain, JSON-tagged report, for the command line and the admin API alike.
package ops

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/subject"
)

// WaitingInSchedules counts the jobs moved off the consumer that still
// wait in the jobs stream under schedules: one per scheduled copy, and the
// number it carries per bundle, whether waiting to fire or fired and not
// yet unpacked. Fast copies are not counted: they wait in their own
// consumer, not in a schedule. Schedules keep firing while it counts: a
// bundle that fires between the listing of the subjects and the reading of
// its header has moved to a subject the listing missed, so the count
// starts again (three times at most; then the last count, which may be
// short by such bundles, is returned).
func WaitingInSchedules(ctx context.Context, js jetstream.JetStream, stream string, schedules subject.Schedules) (int, error) {
	return waiting(ctx, js, stream, schedules, schedules.All())
}

// WaitingFor is WaitingInSchedules for one tenant's jobs.
func WaitingFor(ctx context.Context, js jetstream.JetStream, stream string, schedules subject.Schedules, tenant string) (int, error) {
	// A copy has two tokens after the prefix, the others three.
	return waiting(ctx, js, stream, schedules, string(schedules)+"."+tenant+".*", string(schedules)+".*."+tenant+".*")
}

// waiting counts the moved jobs on the subjects filters match.
func waiting(ctx context.Context, js jetstream.JetStream, stream string, schedules subject.Schedules, filters ...string) (int, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", stream, err)
	}
	total := 0
	for _, filter := range filters {
		var n int
		for range 3 {
			var moved bool
			if n, moved, err = countSchedules(ctx, s, stream, schedules, filter); err != nil || !moved {
				break
			}
		}
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// countSchedules is one count of the subjects filter matches; moved
// reports that a bundle fired while it counted.
func countSchedules(ctx context.Context, s jetstream.Stream, stream string, schedules subject.Schedules, filter string) (n int, moved bool, err error) {
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return 0, false, fmt.Errorf("stream %s info: %w", stream, err)
	}
	for subj, count := range info.State.Subjects {
		switch kind, _ := schedules.Parse(subj); kind {
		case subject.CopyKind:
			n += int(count)
			continue
		case subject.BundleKind, subject.UnpackKind:
		default:
			continue
		}
		m, err := s.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			moved = true // fired or unpacked since the listing
			continue
		}
		if err != nil {
			return 0, false, fmt.Errorf("bundle %s: %w", subj, err)
		}
		k, err := strconv.Atoi(m.Header.Get(header.Bundle))
		if err != nil {
			return 0, false, fmt.Errorf("bundle %s: bad %s header: %w", subj, header.Bundle, err)
		}
		n += k
	}
	return n, moved, nil
}

package ops

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// DeadLetterPurgeOptions selects the dead letters to remove.
type DeadLetterPurgeOptions struct {
	DeadLetterFilter
	// DryRun removes nothing: the report says what a purge would remove.
	DryRun bool
}

// DeadLetterPurgeReport says what a purge of dead letters did.
type DeadLetterPurgeReport struct {
	DryRun bool `json:"dry_run"`
	// Removed are the ids of the dead letters removed (in a dry run, to
	// remove), oldest first.
	Removed []uint64 `json:"removed"`
}

// PurgeDeadLetters removes the dead letters the options select, one by
// one: only those it listed, never one stored meanwhile.
func PurgeDeadLetters(ctx context.Context, fl Fleet, opts DeadLetterPurgeOptions) (DeadLetterPurgeReport, error) {
	rep := DeadLetterPurgeReport{DryRun: opts.DryRun, Removed: []uint64{}}
	var ids []uint64
	var stream jetstream.Stream
	err := eachDeadLetter(ctx, fl, opts.DeadLetterFilter, true, func(d DeadLetter, _ stored) (bool, error) {
		ids = append(ids, d.ID)
		return true, nil
	})
	if err != nil || len(ids) == 0 {
		return rep, err
	}
	if opts.DryRun {
		rep.Removed = ids
		return rep, nil
	}
	if stream, err = fl.dlqStream(ctx); err != nil {
		return rep, err
	}
	for _, id := range ids {
		if err := stream.DeleteMsg(ctx, id); err != nil {
			if errors.Is(err, jetstream.ErrMsgNotFound) || gone(err) {
				continue // removed by someone else meanwhile
			}
			return rep, fmt.Errorf("removing dead letter %d: %w", id, err)
		}
		rep.Removed = append(rep.Removed, id)
	}
	return rep, nil
}

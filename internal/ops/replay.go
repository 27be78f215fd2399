package ops

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/header"
)

// ReplayOptions selects the dead letters to replay.
type ReplayOptions struct {
	DeadLetterFilter
	// DryRun publishes and removes nothing: the report says what a replay
	// would do.
	DryRun bool
}

// Replayed is one dead letter replayed (or, in a dry run, to replay).
type Replayed struct {
	// ID is the dead letter's sequence in its stream.
	ID      uint64 `json:"id"`
	Tenant  string `json:"tenant"`
	Subject string `json:"subject"`
	// Sequence is the job's new sequence in the jobs stream; 0 in a dry
	// run.
	Sequence uint64 `json:"sequence,omitempty"`
	// Again says the jobs stream already held this copy, stored by an
	// interrupted replay: it is stored once.
	Again bool `json:"again,omitempty"`
}

// Skipped is a selected dead letter that cannot be replayed, and why.
type Skipped struct {
	ID     uint64 `json:"id"`
	Tenant string `json:"tenant"`
	Why    string `json:"why"`
}

// ReplayReport says what a replay did.
type ReplayReport struct {
	DryRun   bool       `json:"dry_run"`
	Replayed []Replayed `json:"replayed"`
	Skipped  []Skipped  `json:"skipped"`
	// DuplicateWindow is the jobs stream's duplicate window: a replay
	// interrupted between storing a copy and removing its dead letter
	// must be run again within it to store no second copy.
	DuplicateWindow time.Duration `json:"duplicate_window_ns"`
}

// replayWindow is how many copies a replay has in flight: the most an
// interruption can leave stored with their dead letters still there.
const replayWindow = 64

// ReplayDeadLetters publishes each selected dead letter's job back to its
// original subject, with its data and its own headers (those the workers
// set, Throttler-*, are left behind, but for the tenant and cost headers
// the settings name) and HeaderReplayedFrom, then removes the dead letter,
// once the jobs stream has stored the copy (a copy the stream does not
// store, because its subject is not a job subject, is refused and the
// dead letter kept). The copy carries Nats-Msg-Id "replay:<stream>:<id>",
// so a replay interrupted after a copy was stored and before its dead
// letter was removed stores no second copy when run again within the jobs
// stream's duplicate window. A replayed job is a new job: throttled as any
// other, with an id of its own.
//
// Dead letters cut to fit (Truncated), unreadable bundles of moved jobs
// and those without an original subject are skipped and kept.
func ReplayDeadLetters(ctx context.Context, fl Fleet, opts ReplayOptions) (ReplayReport, error) {
	rep := ReplayReport{DryRun: opts.DryRun, Replayed: []Replayed{}, Skipped: []Skipped{}}
	jobs, err := fl.JetStream.Stream(ctx, fl.Stream)
	if err != nil {
		return rep, fmt.Errorf("the jobs stream %s: %w", fl.Stream, err)
	}
	rep.DuplicateWindow = jobs.CachedInfo().Config.Duplicates
	dlq, err := fl.dlqStream(ctx)
	if err != nil || dlq == nil {
		return rep, err
	}
	name := dlq.CachedInfo().Config.Name

	type inFlight struct {
		r   Replayed
		ack jetstream.PubAckFuture
	}
	var pending []inFlight
	// settle waits for the acks in flight and removes the dead letters
	// whose copies are stored.
	settle := func() error {
		defer func() { pending = pending[:0] }()
		for _, p := range pending {
			select {
			case ack := <-p.ack.Ok():
				p.r.Sequence, p.r.Again = ack.Sequence, ack.Duplicate
			case err := <-p.ack.Err():
				return fmt.Errorf("replaying dead letter %d to %s: %w", p.r.ID, p.r.Subject, err)
			case <-ctx.Done():
				return ctx.Err()
			}
			if err := dlq.DeleteMsg(ctx, p.r.ID); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) && !gone(err) {
				return fmt.Errorf("removing dead letter %d, replayed as %s:%d: %w", p.r.ID, fl.Stream, p.r.Sequence, err)
			}
			rep.Replayed = append(rep.Replayed, p.r)
		}
		return nil
	}
	err = eachDeadLetter(ctx, fl, opts.DeadLetterFilter, false, func(d DeadLetter, st stored) (bool, error) {
		switch {
		case d.Truncated != "":
			rep.Skipped = append(rep.Skipped, Skipped{ID: d.ID, Tenant: d.Tenant, Why: "cut to fit (" + d.Truncated + "): " + d.Reason})
			return true, nil
		case st.Header.Get(header.Bundle) != "":
			rep.Skipped = append(rep.Skipped, Skipped{ID: d.ID, Tenant: d.Tenant, Why: "an unreadable bundle of moved jobs, not a job: " + d.Reason})
			return true, nil
		case d.Subject == "":
			rep.Skipped = append(rep.Skipped, Skipped{ID: d.ID, Tenant: d.Tenant, Why: "no " + header.Subject + " header: not a dead letter of a worker"})
			return true, nil
		}
		r := Replayed{ID: d.ID, Tenant: d.Tenant, Subject: d.Subject}
		if opts.DryRun {
			rep.Replayed = append(rep.Replayed, r)
			return true, nil
		}
		ack, err := fl.JetStream.PublishMsgAsync(fl.replayOf(name, st, d), jetstream.WithExpectStream(fl.Stream))
		if err != nil {
			return false, fmt.Errorf("replaying dead letter %d to %s: %w", d.ID, d.Subject, err)
		}
		pending = append(pending, inFlight{r: r, ack: ack})
		if len(pending) == replayWindow {
			return true, settle()
		}
		return true, nil
	})
	if serr := settle(); err == nil {
		err = serr
	}
	if err == nil {
		rep.Skipped = append(rep.Skipped, missing(opts.IDs, rep)...)
	}
	return rep, err
}

// missing reports the ids asked for by number that no dead letter has (or
// none the filter's other terms matched), so that a replay of a wrong id
// says so rather than answering with nothing.
func missing(ids []uint64, rep ReplayReport) []Skipped {
	found := map[uint64]bool{}
	for _, r := range rep.Replayed {
		found[r.ID] = true
	}
	for _, s := range rep.Skipped {
		found[s.ID] = true
	}
	var out []Skipped
	for _, id := range ids {
		if !found[id] {
			found[id] = true
			out = append(out, Skipped{ID: id, Why: "no such dead letter (or not selected by the other filters)"})
		}
	}
	return out
}

// replayOf builds the job a dead letter replays.
func (fl Fleet) replayOf(stream string, st stored, d DeadLetter) *nats.Msg {
	out := &nats.Msg{Subject: d.Subject, Data: st.Data, Header: nats.Header{}}
	for k, vs := range st.Header {
		if fl.leftBehind(k) {
			continue
		}
		out.Header[k] = append([]string(nil), vs...)
	}
	from := stream + ":" + strconv.FormatUint(d.ID, 10)
	out.Header.Set(header.ReplayedFrom, from)
	out.Header.Set(jetstream.MsgIDHeader, "replay:"+from)
	return out
}

// leftBehind reports whether a replayed job leaves the dead letter's
// header k behind: the headers JetStream acts on, and the workers' own
// but the tenant and cost headers the settings name.
func (fl Fleet) leftBehind(k string) bool {
	if strings.HasPrefix(k, "Nats-") {
		return true
	}
	if !strings.HasPrefix(strings.ToLower(k), strings.ToLower(header.OwnPrefix)) {
		return false
	}
	return !strings.EqualFold(k, fl.TenantFrom.Header) && !strings.EqualFold(k, fl.CostHeader)
}

// gone reports whether a delete failed because the message is no longer
// there.
func gone(err error) bool {
	return errors.Is(err, jetstream.ErrMsgNotFound) ||
		errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) && strings.Contains(err.Error(), "not found")
}

// Package release brings parked jobs back onto their woken subjects at
// once, in their order, chosen by the reason they wait for: a pause that
// ends, or credits topped up.
package release

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/bundle"
	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/subject"
)

// releaseBatch is how many copies Waiting reads at a time.
const releaseBatch = 256

// releaseDeleters is how many deletes of released copies run at once.
const releaseDeleters = 16

// releaseSorted is how many copies Waiting reads before it brings them
// back sorted: a tenant's copies are stored in the order its jobs were
// parked, which is not their order when jobs that waited for a slot were
// parked among new ones; past this many, each run of them is sorted on
// its own, so that memory stays bounded.
const releaseSorted = 65536

// Waiting brings back at once every copy of tenant t's jobs that was
// parked in the jobs stream for reason (their header.WaitReason starts with
// it: header.WaitPaused, header.WaitCredits), in the order of the
// jobs (their sequence in the jobs stream; by runs of releaseSorted
// copies): each is published on its woken subject (Schedules.Woken), which
// the workers pull past the jobs consumer's backlog, then deleted. The
// copies of jobs that wait for anything else are left to come back by
// themselves. It returns how many it brought back, counting only the jobs
// not in seen, which it adds to (nil counts every one): a job released,
// then parked again by a worker that had not yet seen the change, and
// released again, counts once. Each job brought back carries
// header.Released with now, so that the workers decide it even
// while its pause is still stored, or past the new jobs a top-up holds
// back. A copy that fires or is released by another caller meanwhile is
// released once (the woken message's id deduplicates it, and a copy left
// behind runs as a duplicate that is acked without running).
func Waiting(ctx context.Context, js jetstream.JetStream, stream string, schedules subject.Schedules, t, reason string, now time.Time, seen map[string]bool) (int, error) {
	if seen == nil {
		seen = map[string]bool{}
	}
	return waiting(ctx, js, stream, schedules, t, now, pick{match: reasonIs(reason), released: true, seen: seen})
}

// Moved brings back at once every copy of tenant t's jobs moved to wait
// for a slot under the tenant's own limits (header.WaitLimit,
// header.WaitSlot), stored alone or in a bundle waiting to fire, in the
// order of the jobs, as Waiting does: so that a change of the tenant's
// limits applies to its backlog now, not as each job's slot under the old
// limits comes (a job back with a slot reserved under other limits is
// decided again). o narrows the copies down. A bundle is brought back
// whole, when every copy in it is picked, and deleted once all are stored
// again. Jobs brought back carry no header.Released: a paused tenant's
// stay paused. It returns how many jobs it brought back, which it adds to
// o.Seen.
func Moved(ctx context.Context, js jetstream.JetStream, stream string, schedules subject.Schedules, t string, now time.Time, o MovedOptions) (int, error) {
	seen := o.Seen
	if seen == nil {
		seen = map[string]bool{}
	}
	forSlot := func(h nats.Header) bool {
		r := h.Get(header.WaitReason)
		return (strings.HasPrefix(r, header.WaitLimit) || r == header.WaitSlot) && !seen[h.Get(header.JobID)] &&
			(o.Stale == nil || o.Stale(r))
	}
	return waiting(ctx, js, stream, schedules, t, now, pick{match: forSlot, bundles: true, seen: seen})
}

// MovedOptions say which of a tenant's jobs moved for a slot Moved brings
// back; the zero value, every one.
type MovedOptions struct {
	// Stale, if set, picks a copy by the reason it waits for (its
	// header.WaitReason): a limit the tenant no longer has, say, as
	// opposed to one it was moved under since the change. The time a copy
	// was stored cannot tell them apart: a bundle moved under the old
	// limits is unpacked into copies of its jobs when it fires, later.
	Stale func(reason string) bool
	// Seen holds the jobs brought back before, which stay (nor is the
	// bundle holding one brought back): one brought back before and moved
	// again was decided under the new limits. Moved adds those it brings
	// back.
	Seen map[string]bool
}

// Covered is Waiting for the jobs a budget covers: it brings back, in
// their order, the longest run of tenant t's jobs parked for reason whose
// costs (cost reads one from a job's headers) sum to at most budget, and
// leaves the others parked. It returns how many it brought back and the
// order (sequence in the jobs stream) of the first job it left, 0 when it
// left none: the head of those that still wait.
func Covered(ctx context.Context, js jetstream.JetStream, stream string, schedules subject.Schedules, t, reason string, now time.Time,
	budget int64, cost func(nats.Header) int64) (released int, head uint64, err error) {
	take := func(c waitingCopy) bool {
		if head != 0 {
			return false
		}
		k := cost(c.header)
		if k > budget {
			head = c.jobSeq
			return false
		}
		budget -= k
		return true
	}
	released, err = waiting(ctx, js, stream, schedules, t, now, pick{match: reasonIs(reason), released: true, take: take, seen: map[string]bool{}})
	return released, head, err
}

// AnyMoved reports whether tenant t has any job stored off the consumer:
// a copy or a bundle of copies, whatever it waits for.
func AnyMoved(ctx context.Context, js jetstream.JetStream, stream string, schedules subject.Schedules, t string) (bool, error) {
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: movedFilters(schedules, t, true)})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading %s's waiting copies: %w", t, err)
	}
	return cons.CachedInfo().NumPending > 0, nil
}

// movedFilters are the subjects of tenant t's copies, and of its bundles
// too with bundles.
func movedFilters(schedules subject.Schedules, t string, bundles bool) []string {
	filter := schedules.Copy(t, 0)
	filters := []string{filter[:strings.LastIndexByte(filter, '.')] + ".*"}
	if bundles {
		filters = append(filters, schedules.Bundle(t, "*"))
	}
	return filters
}

// pick says which of a tenant's waiting copies waiting brings back.
type pick struct {
	// match reports, from a copy's headers, whether it waits for what
	// ended.
	match func(nats.Header) bool
	// bundles says whether the copies in bundles are read too.
	bundles bool
	// released marks the jobs brought back with header.Released.
	released bool
	// take accepts copies, asked in the jobs' order (nil: every one);
	// once it refuses one, no copy read after it is brought back.
	take func(waitingCopy) bool
	// seen holds the jobs brought back before, counted once.
	seen map[string]bool
}

// reasonIs matches the copies whose header.WaitReason starts with reason.
func reasonIs(reason string) func(nats.Header) bool {
	return func(h nats.Header) bool { return strings.HasPrefix(h.Get(header.WaitReason), reason) }
}

// waiting brings back the copies of tenant t's jobs that p picks.
func waiting(ctx context.Context, js jetstream.JetStream, stream string, schedules subject.Schedules, t string, now time.Time, p pick) (int, error) {
	stopped := false
	at := now.UTC().Format(time.RFC3339Nano)
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: movedFilters(schedules, t, p.bundles)})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading %s's waiting copies: %w", t, err)
	}
	left := int(cons.CachedInfo().NumPending) // copies stored later are the next pass's
	type published struct {
		ack jetstream.PubAckFuture
		seq uint64 // the stored message to delete: the copy's, or its bundle's
		id  string // the job's
	}
	var acks []published
	var run []waitingCopy
	// publish brings back the copies read so far, in their jobs' order.
	publish := func() error {
		slices.SortFunc(run, func(a, b waitingCopy) int { return cmp.Compare(a.jobSeq, b.jobSeq) })
		for _, c := range run {
			if stopped = stopped || (p.take != nil && !p.take(c)); stopped {
				break
			}
			m := WokenMsg(schedules, t, c.id, c.jobSeq, c.header, c.data)
			if p.released {
				m.Header.Set(header.Released, at)
			}
			ack, err := js.PublishMsgAsync(m)
			if err != nil {
				return fmt.Errorf("bringing back job %s: %w", c.id, err)
			}
			acks = append(acks, published{ack: ack, seq: c.seq, id: c.id})
		}
		run = run[:0]
		return nil
	}
	for left > 0 && !stopped {
		batch, err := cons.Fetch(min(left, releaseBatch), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return 0, fmt.Errorf("reading %s's waiting copies: %w", t, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			left--
			run = append(run, p.copies(m)...)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return 0, fmt.Errorf("reading %s's waiting copies: %w", t, err)
		}
		if got == 0 {
			break // fired or released meanwhile
		}
		if len(run) >= releaseSorted {
			if err := publish(); err != nil {
				return len(acks), err
			}
		}
	}
	if err := publish(); err != nil {
		return len(acks), err
	}
	// Every woken message is stored before its copy goes, and a bundle's
	// only once all its copies are: a copy deleted first would lose its
	// job if the publish failed.
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", stream, err)
	}
	var firstErr error
	stored := map[uint64]bool{} // by message to delete: whether every copy of it is stored again
	var order []uint64
	released := 0
	for _, a := range acks {
		ok := true
		select {
		case <-a.ack.Ok():
		case err := <-a.ack.Err():
			firstErr = cmpErr(firstErr, fmt.Errorf("bringing back a parked job: %w", err))
			ok = false // its copy stays, and comes back by itself
		case <-ctx.Done():
			return released, ctx.Err()
		}
		if prev, known := stored[a.seq]; !known {
			order = append(order, a.seq)
			stored[a.seq] = ok
		} else {
			stored[a.seq] = prev && ok
		}
		if ok && !p.seen[a.id] {
			p.seen[a.id] = true
			released++
		}
	}
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, releaseDeleters)
	)
	for _, seq := range order {
		if !stored[seq] {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(seq uint64) {
			defer wg.Done()
			defer func() { <-sem }()
			if err := st.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) && !strings.Contains(err.Error(), "not found") {
				// The copy fires later and is acked as a duplicate.
				mu.Lock()
				firstErr = cmpErr(firstErr, fmt.Errorf("deleting a released copy: %w", err))
				mu.Unlock()
			}
		}(seq)
	}
	wg.Wait()
	return released, firstErr
}

// copies reads the copies m stores that p picks: m itself, or a bundle's
// copies when every one of them is picked (none otherwise).
func (p pick) copies(m jetstream.Msg) []waitingCopy {
	meta, err := m.Metadata()
	if err != nil {
		return nil
	}
	if m.Headers().Get(header.Bundle) == "" {
		if c, ok := parkedCopy(m.Headers(), m.Data(), meta.Sequence.Stream, p.match); ok {
			return []waitingCopy{c}
		}
		return nil
	}
	if !p.bundles {
		return nil
	}
	msgs, err := bundle.Copies(m.Data())
	if err != nil {
		return nil // the workers dead-letter an unreadable bundle when it fires
	}
	out := make([]waitingCopy, 0, len(msgs))
	for _, c := range msgs {
		wc, ok := parkedCopy(c.Header, c.Data, meta.Sequence.Stream, p.match)
		if !ok {
			return nil
		}
		out = append(out, wc)
	}
	return out
}

// waitingCopy is a parked job's copy, read to be brought back.
type waitingCopy struct {
	id     string // the job's id
	jobSeq uint64 // the job's sequence in the jobs stream: its order
	seq    uint64 // the stored message to delete: the copy's, or its bundle's
	header nats.Header
	data   []byte
}

// parkedCopy reads the copy of a job, stored at seq (alone or in a
// bundle) with headers h and data, when match picks it; it reports false
// for a copy that waits for something else or that the worker did not
// write.
func parkedCopy(h nats.Header, data []byte, seq uint64, match func(nats.Header) bool) (waitingCopy, bool) {
	if !match(h) || h.Get(jetstream.ScheduleTargetHeader) == "" {
		return waitingCopy{}, false
	}
	id := h.Get(header.JobID)
	jobSeq, err := strconv.ParseUint(id[strings.LastIndexByte(id, ':')+1:], 10, 64)
	if err != nil {
		return waitingCopy{}, false
	}
	return waitingCopy{id: id, jobSeq: jobSeq, seq: seq, header: h, data: data}, true
}

// cmpErr keeps the first error.
func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

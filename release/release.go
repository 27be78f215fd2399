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
	return waiting(ctx, js, stream, schedules, t, reason, now, seen, nil)
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
	released, err = waiting(ctx, js, stream, schedules, t, reason, now, map[string]bool{}, take)
	return released, head, err
}

// waiting is Waiting, bringing back only the copies take accepts, asked
// in the jobs' order (nil: every one); once take refuses one, no copy
// read after it is brought back.
func waiting(ctx context.Context, js jetstream.JetStream, stream string, schedules subject.Schedules, t, reason string, now time.Time,
	seen map[string]bool, take func(waitingCopy) bool) (int, error) {
	stopped := false
	at := now.UTC().Format(time.RFC3339Nano)
	filter := schedules.Copy(t, 0)
	filter = filter[:strings.LastIndexByte(filter, '.')] + ".*"
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading %s's waiting copies: %w", t, err)
	}
	left := int(cons.CachedInfo().NumPending) // copies stored later are the next pass's
	type published struct {
		ack jetstream.PubAckFuture
		seq uint64 // the copy's stream sequence, to delete
		id  string // the job's
	}
	var acks []published
	var run []waitingCopy
	// publish brings back the copies read so far, in their jobs' order.
	publish := func() error {
		slices.SortFunc(run, func(a, b waitingCopy) int { return cmp.Compare(a.jobSeq, b.jobSeq) })
		for _, c := range run {
			if stopped = stopped || (take != nil && !take(c)); stopped {
				break
			}
			m := WokenMsg(schedules, t, c.id, c.jobSeq, c.header, c.data)
			m.Header.Set(header.Released, at)
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
			if c, ok := parkedCopy(m, reason); ok {
				run = append(run, c)
			}
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
	// Every woken message is stored before its copy goes: a copy deleted
	// first would lose its job if the publish failed.
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", stream, err)
	}
	var (
		mu       sync.Mutex
		firstErr error
		released int
		wg       sync.WaitGroup
		sem      = make(chan struct{}, releaseDeleters)
	)
	for _, p := range acks {
		select {
		case <-p.ack.Ok():
		case err := <-p.ack.Err():
			mu.Lock()
			firstErr = cmpErr(firstErr, fmt.Errorf("bringing back a parked job: %w", err))
			mu.Unlock()
			continue // its copy stays, and comes back by itself
		case <-ctx.Done():
			return released, ctx.Err()
		}
		if !seen[p.id] {
			seen[p.id] = true
			released++
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
		}(p.seq)
	}
	wg.Wait()
	return released, firstErr
}

// waitingCopy is a parked job's copy, read to be brought back.
type waitingCopy struct {
	id     string // the job's id
	jobSeq uint64 // the job's sequence in the jobs stream: its order
	seq    uint64 // the copy's sequence, to delete
	header nats.Header
	data   []byte
}

// parkedCopy reads m as the copy of a job parked for reason, or reports
// false for a copy that waits for something else or that the worker did
// not write.
func parkedCopy(m jetstream.Msg, reason string) (waitingCopy, bool) {
	h := m.Headers()
	if !strings.HasPrefix(h.Get(header.WaitReason), reason) || h.Get(jetstream.ScheduleTargetHeader) == "" {
		return waitingCopy{}, false
	}
	id := h.Get(header.JobID)
	jobSeq, err := strconv.ParseUint(id[strings.LastIndexByte(id, ':')+1:], 10, 64)
	meta, merr := m.Metadata()
	if err != nil || merr != nil {
		return waitingCopy{}, false
	}
	return waitingCopy{id: id, jobSeq: jobSeq, seq: meta.Sequence.Stream, header: h, data: m.Data()}, true
}

// cmpErr keeps the first error.
func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

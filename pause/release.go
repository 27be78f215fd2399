package pause

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/subject"
)

// releaseBatch is how many copies Release reads at a time.
const releaseBatch = 256

// releaseDeleters is how many deletes of released copies run at once.
const releaseDeleters = 16

// Release brings back at once every copy of tenant t's jobs that waits in
// the jobs stream because t was paused (their HeaderWaitReason starts with
// consumer.PauseReason), in the order they were stored: each is published
// on its woken subject (Schedules.Woken), which the workers pull past the
// jobs consumer's backlog, then deleted. The copies of jobs that wait for
// a limit's slot are left to come back at their slots. It returns how many
// it brought back. A copy that fires or is released by another caller
// meanwhile is released once (the woken message's id deduplicates it, and
// a copy left behind runs as a duplicate that is acked without running).
func Release(ctx context.Context, js jetstream.JetStream, stream string, schedules subject.Schedules, t string) (int, error) {
	return release(ctx, js, stream, schedules, t, map[string]bool{})
}

// release is Release, counting only the jobs not in seen, which it adds
// to: a job released, then parked again by a worker that had not yet seen
// the resume, and released again, counts once.
func release(ctx context.Context, js jetstream.JetStream, stream string, schedules subject.Schedules, t string, seen map[string]bool) (int, error) {
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
	for left > 0 {
		batch, err := cons.Fetch(min(left, releaseBatch), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return 0, fmt.Errorf("reading %s's waiting copies: %w", t, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			left--
			h := m.Headers()
			if !strings.HasPrefix(h.Get(consumer.HeaderWaitReason), consumer.PauseReason) || h.Get(jetstream.ScheduleTargetHeader) == "" {
				continue // waits for a slot, or is no scheduled copy
			}
			id := h.Get(consumer.HeaderJobID)
			seq, err := strconv.ParseUint(id[strings.LastIndexByte(id, ':')+1:], 10, 64)
			meta, merr := m.Metadata()
			if err != nil || merr != nil {
				continue // not a copy the worker wrote
			}
			ack, err := js.PublishMsgAsync(consumer.WokenMsg(schedules, t, id, seq, h, m.Data()))
			if err != nil {
				return len(acks), fmt.Errorf("bringing back job %s: %w", id, err)
			}
			acks = append(acks, published{ack: ack, seq: meta.Sequence.Stream, id: id})
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return 0, fmt.Errorf("reading %s's waiting copies: %w", t, err)
		}
		if got == 0 {
			break // fired or released meanwhile
		}
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
			firstErr = cmpErr(firstErr, fmt.Errorf("bringing back a paused job: %w", err))
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

// cmpErr keeps the first error.
func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

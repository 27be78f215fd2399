package fastlane

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/fastlane/fastcopy"
	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/throttle"
)

// passBacklog moves a batch of booked jobs past the backlog, into the lane: it claims each for its
// copy, checks the jobs consumer has not reached the originals, copies
// them and deletes the originals. A job it cannot take is left to the jobs
// consumer, its claim given up.
func (l *Lane) passBacklog(ctx context.Context, batch []arrival) {
	// A take is not cut short by shutdown, which waits for it: stopped
	// between its steps, it would leave claims to be taken over.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.Deadline)
	defer cancel()

	// A job that waited here longer than a take may last is left behind:
	// its copy would be stored too late for the takeover (see takeover).
	// So is one the jobs consumer was seen to deliver: deciding it would
	// charge its tenant for a copy never made, on top of the worker's
	// charge of the original (decided as fresh, it does not read the
	// lane's reservation), and leave that slot unused.
	now, delivered := l.cfg.Now(), l.delivered.Load()
	fresh := batch[:0]
	for _, a := range batch {
		if now.Sub(a.at) > l.cfg.Deadline || a.seq <= delivered {
			l.backlog.leave(a.tenant, a.seq)
			continue
		}
		fresh = append(fresh, a)
	}
	batch = fresh
	if len(batch) == 0 {
		return
	}

	// Read the originals while the jobs are decided: a round trip saved.
	originals := make([]*jetstream.RawStreamMsg, len(batch)) // nil: left below
	read := make(chan struct{})
	go func() {
		defer close(read)
		inParallel(len(batch), func(i int) { originals[i], _ = l.cfg.Stream.GetMsg(cctx, batch[i].seq) })
	}()
	defer func() { <-read }()

	claimed := l.claim(cctx, batch)
	if len(claimed) == 0 {
		return
	}
	// An original the jobs consumer has delivered may have been decided
	// before the claim, as a fresh job that records no owner: leave it.
	info, ierr := l.cfg.Jobs.Info(cctx)
	if ierr == nil {
		l.sawDelivered(info.Delivered.Stream)
	}
	<-read
	var copies []arrival
	for _, i := range claimed {
		if ierr != nil || batch[i].seq <= info.Delivered.Stream || originals[i] == nil {
			l.release(cctx, batch[i])
			continue
		}
		copies = append(copies, batch[i])
		originals[len(copies)-1] = originals[i]
	}
	l.copyOut(cctx, copies, originals[:len(copies)])
}

// sawDelivered records that the jobs consumer has delivered up to stream
// sequence seq.
func (l *Lane) sawDelivered(seq uint64) {
	for {
		cur := l.delivered.Load()
		if seq <= cur || l.delivered.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// claim decides each job of batch as its copy, which charges it (or
// reserves its slot) and makes the copy its owner, and returns the indexes
// of the jobs claimed; the others are left to the jobs consumer.
func (l *Lane) claim(ctx context.Context, batch []arrival) []int {
	copies := make([]throttle.Copy, len(batch))
	for i, a := range batch {
		copies[i] = throttle.Copy{Request: throttle.Request{Tenant: a.tenant, JobID: a.id, Cost: a.cost}, Group: a.group,
			Incarnation: fastcopy.Incarnation(a.seq)}
	}
	results := l.cfg.Decider.DecideBatch(ctx, copies)
	var claimed []int
	for i, a := range batch {
		res := results[i]
		l.count(a.tenant, func(s *consumer.TenantStats) { s.RedisCalls++ })
		switch {
		case res.Err != nil:
			l.backlog.leave(a.tenant, a.seq)
		case res.Outcome == throttle.Admitted:
			batch[i].admitted = true
			claimed = append(claimed, i) // the decision recorded the copy as owner
		case res.Outcome == throttle.Reserved:
			// A slot is held for the job: the copy waits for it. Deferred,
			// the decision recorded no owner; claim it.
			ok, _, err := l.cfg.Owners.Claim(ctx, a.tenant, a.id, fastcopy.Incarnation(a.seq))
			if err != nil || !ok {
				l.backlog.leave(a.tenant, a.seq)
				continue
			}
			claimed = append(claimed, i)
		default:
			// Limited past the horizon (nothing was charged) or a Duplicate:
			// the jobs consumer deals with it in its turn.
			l.backlog.leave(a.tenant, a.seq)
		}
	}
	return claimed
}

// copyOut publishes the copy of each claimed job from its original
// (originals[i] is jobs[i]'s), then deletes the originals whose copies are
// stored.
func (l *Lane) copyOut(ctx context.Context, jobs []arrival, originals []*jetstream.RawStreamMsg) {
	acks := make([]jetstream.PubAckFuture, len(jobs))
	for i, a := range jobs {
		raw := originals[i]
		decided := fastcopy.Reserved
		if a.admitted {
			decided = fastcopy.Admitted
		}
		msg := &nats.Msg{Subject: l.cfg.Subjects.Fast(a.tenant, a.seq), Data: raw.Data, Header: nats.Header{}}
		header.Copy(msg.Header, raw.Header)
		msg.Header.Set(header.JobID, a.id)
		msg.Header.Set(header.Subject, raw.Subject)
		msg.Header.Set(header.Published, raw.Time.UTC().Format(time.RFC3339Nano))
		msg.Header.Set(fastcopy.Header, decided)
		msg.Header.Set(jetstream.MsgIDHeader, "fast:"+a.id)
		f, err := l.cfg.JetStream.PublishMsgAsync(msg)
		if err != nil {
			l.release(ctx, a)
			continue
		}
		acks[i] = f
	}
	var stored []arrival // their originals are deleted
	for i, a := range jobs {
		if acks[i] == nil {
			continue
		}
		var err error
		select {
		case <-acks[i].Ok():
		case err = <-acks[i].Err():
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err != nil && !l.storedDespite(ctx, a, err) {
			continue
		}
		l.count(a.tenant, func(s *consumer.TenantStats) { s.FastLaned++ })
		stored = append(stored, a)
	}
	inParallel(len(stored), func(i int) {
		if err := l.cfg.Stream.DeleteMsg(ctx, stored[i].seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			// The original, when delivered, finds its copy and is acked.
			l.cfg.Log.Debug("fast lane: deleting a copied original failed", "job", stored[i].id, "err", err)
		}
	})
}

// storedDespite settles the claim of a job whose copy's publish failed
// with err, and reports whether the copy is stored all the same (its ack
// was lost). A refused publish stored nothing: the claim is given up.
// After a timeout the copy may still be stored, and giving the claim up
// then would let the original run too: it is kept, and the original runs
// once it is taken over, if the copy is not stored by then.
func (l *Lane) storedDespite(ctx context.Context, a arrival, err error) bool {
	stored, serr := copyStored(ctx, l.cfg.Stream, l.cfg.Subjects, a.tenant, a.seq)
	switch {
	case stored:
		return true
	case !timedOut(err) && serr == nil:
		l.release(ctx, a)
	default:
		// The claim is kept, but the job is booked for the jobs consumer,
		// so that its tenant's later jobs wait behind it.
		l.backlog.leave(a.tenant, a.seq)
		l.cfg.Log.Warn("fast lane: copying a job failed; unless the copy was stored, its original runs once the claim is taken over",
			"tenant", a.tenant, "job", a.id, "err", err)
	}
	return false
}

// laneRequests caps the NATS requests one take has under way at once.
const laneRequests = 8

// inParallel calls f(0) … f(n-1), up to laneRequests at once, and returns
// when all have returned.
func inParallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, laneRequests)
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(i)
		}()
	}
	wg.Wait()
}

// release gives up the claim of a job the lane could not copy and leaves
// the job to the jobs consumer.
func (l *Lane) release(ctx context.Context, a arrival) {
	if _, err := l.cfg.Owners.Release(ctx, a.tenant, a.id, fastcopy.Incarnation(a.seq)); err != nil {
		l.cfg.Log.Warn("fast lane: giving up a claim failed; the job runs once the claim is taken over", "tenant", a.tenant, "job", a.id, "err", err)
	}
	l.backlog.leave(a.tenant, a.seq)
}

// timedOut reports whether err is a wait that ran out, after which the
// outcome of what was waited for is unknown.
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrAsyncPublishTimeout)
}

package consumer

import (
	"container/heap"
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Deferral is one limited job to put off.
type Deferral struct {
	// Msg is the delivered message. The Deferrer settles it.
	Msg jetstream.Msg
	// Job is the job Msg carries.
	Job Job
	// Wait is how long the job must wait: until its reserved slot.
	Wait time.Duration
	// Moved is set by the Deferrer when the job left the consumer.
	Moved bool
	// Err is set by the Deferrer when settling failed. The job is not lost:
	// JetStream redelivers an unsettled message after AckWait.
	Err error
}

// Deferrer puts off jobs the throttle has limited. It must settle every
// message (NAK it, or ACK it once the job is safely stored elsewhere) and
// never lose a job. The worker calls it from one goroutine, with the jobs in
// the order their slots were reserved.
type Deferrer interface {
	// Defer puts off each job so that it comes back after its wait, and
	// records the outcome in its Deferral.
	Defer(ctx context.Context, ds []Deferral)
}

// NakDeferrer defers a job with NakWithDelay: JetStream redelivers it after
// the wait. The job keeps its place in the consumer's ack-pending set while
// it waits, so it counts against MaxAckPending.
type NakDeferrer struct{}

// Defer implements Deferrer.
func (NakDeferrer) Defer(_ context.Context, ds []Deferral) {
	for i := range ds {
		ds[i].Err = ds[i].Msg.NakWithDelay(nakDelay(ds[i].Wait))
	}
}

// nakDelay turns a throttle wait into a redelivery delay. The wait is already
// rounded up to the microsecond; one more millisecond absorbs clock reading
// jitter so the job does not come back a hair early and pay a second trip.
func nakDelay(wait time.Duration) time.Duration {
	if wait <= 0 {
		return 0
	}
	return wait + time.Millisecond
}

// ScheduleDeferrer moves jobs off the consumer: it publishes a copy of each
// job to a subject of its own in the jobs stream, with a message schedule
// (Nats-Schedule: @at T, Nats-Schedule-Target: the job's subject) that puts
// the copy back on the job's subject at its reserved slot, then acks the
// original. The job's slot in MaxAckPending is free while it waits.
//
// The copy carries the job's identity (Throttler-Job-Id), original subject,
// publish time, slot and move count (Throttler-Deferrals), which is also its
// incarnation for owner tracking: if the worker dies between the publish and
// the ack, the throttle lets only one incarnation run. The copies of one call
// are published asynchronously, in order, and all acks awaited together.
//
// Needs nats-server 2.12 or later and a stream with AllowMsgSchedules.
type ScheduleDeferrer struct {
	// JetStream publishes the copies. Required.
	JetStream jetstream.JetStream
	// Subject returns the schedule subject of a job. It must be unique per
	// job (all moves of one job share it, so a new schedule replaces the
	// old one), captured by the jobs stream and not by the consumer.
	Subject func(job Job) string
	// Timeout bounds the wait for the publish acks. Defaults to 5s.
	Timeout time.Duration
}

// Defer implements Deferrer. A job whose copy cannot be stored is NAK'd with
// its wait instead: it is never lost.
func (d ScheduleDeferrer) Defer(ctx context.Context, ds []Deferral) {
	timeout := d.Timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	now := time.Now()
	acks := make([]jetstream.PubAckFuture, len(ds))
	for i := range ds {
		var err error
		acks[i], err = d.JetStream.PublishMsgAsync(d.copyOf(ds[i], now))
		if err != nil {
			ds[i].Err = err
		}
	}
	for i := range ds {
		if ds[i].Err == nil {
			select {
			case <-acks[i].Ok():
			case ds[i].Err = <-acks[i].Err():
			case <-pctx.Done():
				ds[i].Err = pctx.Err()
			}
		}
		if ds[i].Err != nil {
			err := fmt.Errorf("moving job %s failed, NAK'd instead: %w", ds[i].Job.ID, ds[i].Err)
			if nerr := ds[i].Msg.NakWithDelay(nakDelay(ds[i].Wait)); nerr != nil {
				err = fmt.Errorf("%w; and NAK failed: %v", err, nerr)
			}
			ds[i].Err = err
			continue
		}
		// The copy is stored. A lost ack only means the original comes back
		// after AckWait and is found to be a duplicate.
		ds[i].Moved = true
		if err := ds[i].Msg.Ack(); err != nil {
			ds[i].Err = fmt.Errorf("acking moved job %s: %w", ds[i].Job.ID, err)
		}
	}
}

// copyOf builds the scheduled copy of a deferred job.
func (d ScheduleDeferrer) copyOf(df Deferral, now time.Time) *nats.Msg {
	job := df.Job
	move := job.Deferrals + 1
	slot := now.Add(df.Wait)
	out := &nats.Msg{Subject: d.Subject(job), Data: df.Msg.Data(), Header: nats.Header{}}
	copyHeaders(out.Header, df.Msg.Headers())
	out.Header.Set(HeaderJobID, job.ID)
	out.Header.Set(HeaderSubject, job.Subject)
	out.Header.Set(HeaderDeferrals, strconv.Itoa(move))
	out.Header.Set(HeaderPublished, job.Published.UTC().Format(time.RFC3339Nano))
	out.Header.Set(HeaderSlot, strconv.FormatInt(slot.UnixMicro(), 10))
	out.Header.Set(jetstream.MsgIDHeader, "sched:"+job.ID+":"+strconv.Itoa(move))
	out.Header.Set(jetstream.ScheduleHeader, "@at "+fireAt(now, df.Wait).Format(time.RFC3339))
	out.Header.Set(jetstream.ScheduleTargetHeader, job.Subject)
	return out
}

// fireAt is when a schedule must fire for a job that may run after wait:
// schedules have one-second precision, so round up to the next whole second,
// never down.
func fireAt(now time.Time, wait time.Duration) time.Time {
	t := now.Add(wait).UTC()
	if r := t.Truncate(time.Second); r.Before(t) {
		return r.Add(time.Second)
	}
	return t
}

// FairDeferrer chooses, per job, between NAK'ing and moving it. Short waits
// are NAK'd, which is cheap and precise; a job is moved off the consumer when
// its wait is at least MoveAfter, or when its tenant already holds
// TenantShare NAK'd jobs on this worker, so that one tenant's backlog cannot
// fill MaxAckPending and starve the others. Safe for concurrent use.
type FairDeferrer struct {
	// Nak defers short waits. Defaults to NakDeferrer.
	Nak Deferrer
	// Move takes jobs off the consumer. Required.
	Move Deferrer
	// MoveAfter is the shortest wait that is moved. Defaults to 5s.
	MoveAfter time.Duration
	// TenantShare is how many NAK'd jobs one tenant may have waiting on this
	// worker before its jobs are moved. Defaults to 50.
	TenantShare int

	mu      sync.Mutex
	waiting map[string]*expiries
	pruned  time.Time // when prune last ran
}

// Defer implements Deferrer.
func (f *FairDeferrer) Defer(ctx context.Context, ds []Deferral) {
	var naks, moves []int
	for i := range ds {
		if f.shouldMove(ds[i].Job.Tenant, ds[i].Wait) {
			moves = append(moves, i)
		} else {
			naks = append(naks, i)
		}
	}
	nak := f.Nak
	if nak == nil {
		nak = NakDeferrer{}
	}
	run := func(d Deferrer, idx []int) {
		if len(idx) == 0 {
			return
		}
		sub := make([]Deferral, len(idx))
		for k, i := range idx {
			sub[k] = ds[i]
		}
		d.Defer(ctx, sub)
		for k, i := range idx {
			ds[i] = sub[k]
		}
	}
	run(nak, naks)
	run(f.Move, moves)
}

// shouldMove decides the path and, for a NAK, books the tenant's share
// until the wait has passed.
func (f *FairDeferrer) shouldMove(tenant string, wait time.Duration) bool {
	after := f.MoveAfter
	if after == 0 {
		after = 5 * time.Second
	}
	if wait >= after {
		return true
	}
	share := f.TenantShare
	if share == 0 {
		share = 50
	}
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.waiting == nil {
		f.waiting = map[string]*expiries{}
	}
	e := f.waiting[tenant]
	if e == nil {
		e = &expiries{}
		f.waiting[tenant] = e
	}
	for e.Len() > 0 && !(*e)[0].After(now) {
		heap.Pop(e)
	}
	if e.Len() >= share {
		return true
	}
	heap.Push(e, now.Add(wait))
	if len(f.waiting) > 1024 && now.Sub(f.pruned) > time.Second {
		f.prune(now)
	}
	return false
}

// prune forgets tenants with nothing waiting, at most once a second.
// Called with mu held.
func (f *FairDeferrer) prune(now time.Time) {
	f.pruned = now
	for t, e := range f.waiting {
		for e.Len() > 0 && !(*e)[0].After(now) {
			heap.Pop(e)
		}
		if e.Len() == 0 {
			delete(f.waiting, t)
		}
	}
}

// expiries is a min-heap of times.
type expiries []time.Time

func (e expiries) Len() int           { return len(e) }
func (e expiries) Less(i, j int) bool { return e[i].Before(e[j]) }
func (e expiries) Swap(i, j int)      { e[i], e[j] = e[j], e[i] }
func (e *expiries) Push(x any)        { *e = append(*e, x.(time.Time)) }
func (e *expiries) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

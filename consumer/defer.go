package consumer

import (
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/subject"
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

// Deferrer puts off jobs the throttle has limited, and the retries of jobs
// whose handler failed. It must settle every message (NAK it, or ACK it
// once the job is safely stored elsewhere) and never lose a job. The worker
// calls it from its deferring goroutine, with the jobs in the order their
// slots were reserved, and from handler goroutines for retries, one job at
// a time: it must be safe for concurrent use.
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
	// Subjects names the subjects copies and bundles are stored on
	// (Schedules.Copy, Bundle and Unpack): the jobs stream binds them all
	// and the jobs consumer reads none. Required.
	Subjects subject.Schedules
	// Timeout bounds the wait for the publish acks. Defaults to 5s.
	Timeout time.Duration
	// Bundle, when 2 or more, moves up to that many jobs of one tenant that
	// are deferred together as one scheduled message, which the server
	// stores far faster than a message each: a tenant dumping a backlog is
	// taken in sooner, so the jobs stored behind it wait less. A bundle is
	// stored on Subjects.Bundle and fires, at the earliest of its jobs'
	// slots, onto Subjects.Unpack, where Unbundle publishes the jobs' own
	// scheduled copies. Defaults to 0 (a message per job).
	Bundle int
	// MaxWait, when positive, caps how long a copy waits in the stream: a
	// job that must wait longer comes back after MaxWait, is decided again
	// and deferred again, its reservation keeping its slot. Set it well
	// under the jobs stream's MaxAge, so that no copy expires unrun.
	// Defaults to 0 (no cap).
	MaxWait time.Duration
}

// hop is how long the copy of a job that must wait for wait stays in the
// stream: wait itself, or MaxWait when that is shorter.
func (d ScheduleDeferrer) hop(wait time.Duration) time.Duration {
	if d.MaxWait > 0 {
		return min(wait, d.MaxWait)
	}
	return wait
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

	// One scheduled message per bundle of jobs (or per job, when bundling
	// is off or a bundle would hold one job).
	type unit struct {
		first, n int // ds[first : first+n]
		ack      jetstream.PubAckFuture
		err      error
	}
	var units []unit
	for i := 0; i < len(ds); {
		n := d.bundleRun(ds[i:])
		u := unit{first: i, n: n}
		var msg *nats.Msg
		if n == 1 {
			msg = d.copyOf(ds[i], now)
		} else {
			msg = d.bundleOf(ds[i:i+n], now)
		}
		u.ack, u.err = d.JetStream.PublishMsgAsync(msg)
		units = append(units, u)
		i += n
	}
	for _, u := range units {
		if u.err == nil {
			select {
			case <-u.ack.Ok():
			case u.err = <-u.ack.Err():
			case <-pctx.Done():
				u.err = pctx.Err()
			}
		}
		for i := u.first; i < u.first+u.n; i++ {
			if u.err != nil {
				err := fmt.Errorf("moving job %s failed, NAK'd instead: %w", ds[i].Job.ID, u.err)
				if nerr := ds[i].Msg.NakWithDelay(nakDelay(ds[i].Wait)); nerr != nil {
					err = fmt.Errorf("%w; and NAK failed: %v", err, nerr)
				}
				ds[i].Err = err
				continue
			}
			// The copy is stored. A lost ack only means the original comes
			// back after AckWait and is found to be a duplicate.
			ds[i].Moved = true
			if err := ds[i].Msg.Ack(); err != nil {
				ds[i].Err = fmt.Errorf("acking moved job %s: %w", ds[i].Job.ID, err)
			}
		}
	}
}

// maxBundleBytes caps the data of one bundle, well under NATS' default
// 1 MB payload limit.
const maxBundleBytes = 256 << 10

// bundleRun is how many of ds, from the first, go into one bundle: the
// following jobs of the same tenant, up to Bundle jobs and maxBundleBytes.
func (d ScheduleDeferrer) bundleRun(ds []Deferral) int {
	if d.Bundle < 2 {
		return 1
	}
	n, size := 1, len(ds[0].Msg.Data())
	for n < len(ds) && n < d.Bundle && ds[n].Job.Tenant == ds[0].Job.Tenant {
		size += len(ds[n].Msg.Data())
		if size > maxBundleBytes {
			break
		}
		n++
	}
	return n
}

// bundleOf builds one scheduled message carrying the scheduled copies of
// several jobs of one tenant, marked with HeaderBundle. It fires at the
// earliest of their slots onto its unpack subject, where RunUnbundler
// publishes the copies it carries, each scheduled for its own slot.
func (d ScheduleDeferrer) bundleOf(ds []Deferral, now time.Time) *nats.Msg {
	soonest := d.hop(ds[0].Wait)
	subjects := make([]string, len(ds))
	own := make([][copyFieldCount][2]string, len(ds))
	size := 0
	for k, df := range ds {
		subjects[k], own[k] = d.copyFields(df, now)
		size += copySize(subjects[k], df.Msg.Headers(), own[k][:], df.Msg.Data())
		soonest = min(soonest, d.hop(df.Wait))
	}
	data := appendBundleStart(make([]byte, 0, size+1+binary.MaxVarintLen32), len(ds))
	for k, df := range ds {
		data = appendCopy(data, subjects[k], df.Msg.Headers(), true, own[k][:], df.Msg.Data())
	}
	job := ds[0].Job
	// The subject and message id name the bundle's exact contents. A
	// bundle stored again after a crash (its originals were not all acked)
	// is then deduplicated only when it holds the same copies: one that
	// holds others is stored too, rather than taken for the first (whose
	// dedup would lose the new jobs' copies) or replacing its schedule
	// (which would lose the first bundle's other jobs, already acked).
	id := strings.ReplaceAll(job.ID, ":", "-") + "-" + bundleDigest(ds)
	out := &nats.Msg{Subject: d.Subjects.Bundle(job.Tenant, id), Data: data, Header: nats.Header{}}
	out.Header.Set(HeaderBundle, strconv.Itoa(len(ds)))
	out.Header.Set(HeaderJobID, job.ID)
	out.Header.Set(HeaderSubject, job.Subject)
	out.Header.Set(jetstream.MsgIDHeader, "bundle:"+id)
	out.Header.Set(jetstream.ScheduleHeader, "@at "+fireAt(now, soonest).Format(time.RFC3339Nano))
	out.Header.Set(jetstream.ScheduleTargetHeader, d.Subjects.Unpack(job.Tenant, id))
	return out
}

// bundleDigest names the copies a bundle of ds carries: a 64-bit FNV-1a
// hash, in hex, of each job's id and move count.
func bundleDigest(ds []Deferral) string {
	h := fnv.New64a()
	var line []byte
	for _, df := range ds {
		line = append(line[:0], df.Job.ID...)
		line = append(line, ':')
		line = strconv.AppendInt(line, int64(df.Job.Deferrals)+1, 10)
		line = append(line, '\n')
		h.Write(line)
	}
	return strconv.FormatUint(h.Sum64(), 16)
}

// Unbundle publishes the scheduled copies a fired bundle carries, waits for
// their publish acks, then deletes the bundle from the stream (so a bundle
// still in the stream is one not yet unpacked) and acks it. If publishing
// fails the caller hands the bundle back; unpacked again later, the copies
// already stored are deduplicated by their Nats-Msg-Id. If only the
// deletion fails (a stream that denies deletes, say), the bundle is acked
// all the same, its copies being stored, and the error matches
// errBundleLeft: handed back, it would be unpacked again and again.
func Unbundle(ctx context.Context, js jetstream.JetStream, msg jetstream.Msg) error {
	copies, err := decodeBundle(msg.Data())
	if err != nil {
		return fmt.Errorf("reading bundle: %w", err)
	}
	acks := make([]jetstream.PubAckFuture, 0, len(copies))
	for _, c := range copies {
		f, err := js.PublishMsgAsync(c)
		if err != nil {
			return fmt.Errorf("unbundling %d jobs: %w", len(copies), err)
		}
		acks = append(acks, f)
	}
	for _, f := range acks {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("unbundling %d jobs: %w", len(copies), err)
		case <-ctx.Done():
			return fmt.Errorf("unbundling %d jobs: %w", len(copies), ctx.Err())
		}
	}
	if err := deleteFromStream(ctx, js, msg); err != nil {
		if aerr := msg.Ack(); aerr != nil {
			return fmt.Errorf("acking unpacked bundle: %w", aerr)
		}
		return fmt.Errorf("%w: %w", errBundleLeft, err)
	}
	return msg.Ack()
}

// errBundleLeft says a bundle was unpacked and acked but is still in the
// stream: deleting it failed.
var errBundleLeft = errors.New("unpacked bundle left in the stream")

// deleteFromStream deletes msg from the stream it was delivered from; a
// message already gone is no error.
func deleteFromStream(ctx context.Context, js jetstream.JetStream, msg jetstream.Msg) error {
	meta, err := msg.Metadata()
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	stream, err := js.Stream(ctx, meta.Stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", meta.Stream, err)
	}
	if err := stream.DeleteMsg(ctx, meta.Sequence.Stream); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("stream %s: %w", meta.Stream, err)
	}
	return nil
}

// copyFieldCount is how many headers a scheduled copy sets itself.
const copyFieldCount = 8

// copyFields returns the subject of the scheduled copy of a deferred job
// and the headers it sets itself, as (key, value) pairs; besides them it
// carries the job's own headers but those JetStream acts on (Nats-*).
func (d ScheduleDeferrer) copyFields(df Deferral, now time.Time) (string, [copyFieldCount][2]string) {
	job := df.Job
	move := strconv.Itoa(job.Deferrals + 1)
	slot := now.Add(df.Wait)
	return d.Subjects.Copy(job.Tenant, job.OriginalSequence()), [copyFieldCount][2]string{
		{HeaderJobID, job.ID},
		{HeaderSubject, job.Subject},
		{HeaderDeferrals, move},
		{HeaderPublished, job.Published.UTC().Format(time.RFC3339Nano)},
		{HeaderSlot, strconv.FormatInt(slot.UnixMicro(), 10)},
		{jetstream.MsgIDHeader, "sched:" + job.ID + ":" + move},
		{jetstream.ScheduleHeader, "@at " + fireAt(now, d.hop(df.Wait)).Format(time.RFC3339Nano)},
		{jetstream.ScheduleTargetHeader, job.Subject},
	}
}

// copyOf builds the scheduled copy of a deferred job.
func (d ScheduleDeferrer) copyOf(df Deferral, now time.Time) *nats.Msg {
	subject, own := d.copyFields(df, now)
	out := &nats.Msg{Subject: subject, Data: df.Msg.Data(), Header: nats.Header{}}
	copyHeaders(out.Header, df.Msg.Headers())
	out.Header.Del(HeaderFast) // see replacedInCopy
	for _, kv := range own {
		out.Header.Set(kv[0], kv[1])
	}
	return out
}

// fireAt is when a schedule must fire for a job that may run after wait: one
// millisecond past it, as for a NAK (nakDelay), rounded up to the
// millisecond, never down, in UTC. The header carries it as RFC 3339 with
// the fraction (time.RFC3339Nano), which servers parse with time.RFC3339:
// fractions are accepted on parsing. The server checks its schedules at its
// own pace (at most every 250 ms in nats-server 2.12.0 and 2.15.2) and fires a
// schedule at the first check at or after its time: never early.
func fireAt(now time.Time, wait time.Duration) time.Time {
	t := now.Add(nakDelay(wait)).UTC()
	if r := t.Truncate(time.Millisecond); r.Before(t) {
		return r.Add(time.Millisecond)
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
	// MaxAge is the jobs stream's MaxAge (0: none). A NAK'd job stays the
	// same message, which the stream drops once it is MaxAge old, so a job
	// whose message would be older than half of it when it came back is
	// moved instead: its copy is a new message. Give Move a MaxWait under
	// half of it too.
	MaxAge time.Duration

	mu      sync.Mutex
	waiting map[string]*expiries
	pruned  time.Time // when prune last ran
}

// Defer implements Deferrer.
func (f *FairDeferrer) Defer(ctx context.Context, ds []Deferral) {
	var naks, moves []int
	for i := range ds {
		if f.tooOldToNak(ds[i]) || f.shouldMove(ds[i].Job.Tenant, ds[i].Wait) {
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

// tooOldToNak reports whether the stream's MaxAge could drop df's message
// before it comes back from a NAK: it would be older than half of MaxAge
// then. A message without metadata is taken to be that old.
func (f *FairDeferrer) tooOldToNak(df Deferral) bool {
	if f.MaxAge <= 0 {
		return false
	}
	meta, err := df.Msg.Metadata()
	if err != nil || meta == nil {
		return true
	}
	return time.Since(meta.Timestamp)+df.Wait > f.MaxAge/2
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

// WaitingInSchedules counts the jobs moved off the consumer that still wait
// in stream under prefix (the schedule subject prefix, e.g. "sched"): one
// per scheduled copy, and the number it carries per bundle, whether waiting
// to fire (prefix.b.…) or fired and not yet unpacked (prefix.u.…). Fast
// copies (prefix.f.…) are not counted. Schedules
// keep firing while it counts: a bundle that fires between the listing of
// the subjects and the reading of its header has moved to a subject the
// listing missed, so the count starts again (three times at most; then the
// last count, which may be short by such bundles, is returned).
func WaitingInSchedules(ctx context.Context, js jetstream.JetStream, stream, prefix string) (int, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", stream, err)
	}
	var n int
	for range 3 {
		var moved bool
		if n, moved, err = waitingInSchedules(ctx, s, stream, prefix); err != nil || !moved {
			break
		}
	}
	return n, err
}

// waitingInSchedules is one count of WaitingInSchedules; moved reports that
// a bundle fired while it counted.
func waitingInSchedules(ctx context.Context, s jetstream.Stream, stream, prefix string) (n int, moved bool, err error) {
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(prefix+".>"))
	if err != nil {
		return 0, false, fmt.Errorf("stream %s info: %w", stream, err)
	}
	for subject, count := range info.State.Subjects {
		// A copy is prefix.<tenant>.<id>; a bundle prefix.b.<tenant>.<id>
		// or prefix.u.<tenant>.<id>, one token more; so is a fast copy,
		// prefix.f.<tenant>.<seq>, which stays stored once run and waits
		// in its own consumer, not in a schedule.
		kind := strings.TrimPrefix(subject, prefix+".")
		if strings.Count(kind, ".") != 2 {
			n += int(count)
			continue
		}
		if !(strings.HasPrefix(kind, "b.") || strings.HasPrefix(kind, "u.")) {
			continue
		}
		m, err := s.GetLastMsgForSubject(ctx, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			moved = true // fired or unpacked since the listing
			continue
		}
		if err != nil {
			return 0, false, fmt.Errorf("bundle %s: %w", subject, err)
		}
		k, err := strconv.Atoi(m.Header.Get(HeaderBundle))
		if err != nil {
			return 0, false, fmt.Errorf("bundle %s: bad %s header: %w", subject, HeaderBundle, err)
		}
		n += k
	}
	return n, moved, nil
}

package consumer

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/bundle"
	"github.com/throttler/throttler/fastlane/fastcopy"
	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/subject"
)

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
	// slots, onto Subjects.Unpack, where the worker publishes the jobs' own
	// scheduled copies. Defaults to 0 (a message per job).
	Bundle int
	// MaxWait, when positive, caps how long a copy waits in the stream: a
	// job that must wait longer comes back after MaxWait, is decided again
	// and deferred again, its reservation keeping its slot. Set it well
	// under the jobs stream's MaxAge, so that no copy expires unrun.
	// Defaults to 0 (no cap).
	MaxWait time.Duration
	// Lead is how long before its slot a copy is scheduled to fire. The
	// server fires schedules in passes (every 250 ms) and a fired copy is
	// delivered behind the stream's backlog, so a copy scheduled for its
	// slot comes back late by a varying amount, and the copies that came
	// late run together with the ones on time: more than the limit over
	// that stretch, though their slots never were. Fired early, a copy is
	// kept by the worker until its slot (shortwait.go) and runs on it.
	// Defaults to 0 (fire at the slot).
	Lead time.Duration
	// Now is the clock the slots are counted from. Defaults to time.Now.
	Now func() time.Time
}

// stayFor is how long the copy of a job that must wait for wait stays in the
// stream: wait less Lead, or MaxWait when that is shorter (the copy then
// comes back well before its slot, to be deferred again).
func (d ScheduleDeferrer) stayFor(wait time.Duration) time.Duration {
	if d.MaxWait > 0 && d.MaxWait < wait {
		return d.MaxWait
	}
	return max(0, wait-d.Lead)
}

// Defer implements Deferrer. A job whose copy cannot be stored, or would
// be over the server's limits, is NAK'd with its wait instead
// (Deferral.NakedInstead): it is never lost.
func (d ScheduleDeferrer) Defer(ctx context.Context, ds []Deferral) {
	timeout := d.Timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	now := clock(d.Now)()

	// One scheduled message per bundle of jobs (or per job, when bundling
	// is off or a bundle would hold one job).
	type scheduled struct {
		first, n int // ds[first : first+n]
		ack      jetstream.PubAckFuture
		err      error
	}
	var msgs []scheduled
	limit := header.MaxPayload(d.JetStream)
	for i := 0; i < len(ds); {
		n := d.bundleRun(ds[i:], limit)
		u := scheduled{first: i, n: n}
		var msg *nats.Msg
		if n == 1 {
			msg = d.copyOf(ds[i], now)
		} else {
			msg = d.bundleOf(ds[i:i+n], now)
		}
		if u.err = header.Fits(msg, limit); u.err == nil {
			u.ack, u.err = d.JetStream.PublishMsgAsync(msg)
		}
		msgs = append(msgs, u)
		i += n
	}
	for _, u := range msgs {
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
				ds[i].NakedInstead = fmt.Errorf("moving job %s: %w", ds[i].Job.ID, u.err)
				if err := ds[i].Msg.NakWithDelay(nakDelay(ds[i].Wait)); err != nil {
					ds[i].Err = fmt.Errorf("NAK'ing job %s: %w", ds[i].Job.ID, err)
				}
				continue
			}
			// The copy is stored. A lost ack only means the original comes
			// back after AckWait and is found to be a duplicate.
			ds[i].Moved = true
			ds[i].FiresAt = fireAt(now, d.stayFor(ds[i].Wait))
			if err := ds[i].Msg.Ack(); err != nil {
				ds[i].Err = fmt.Errorf("acking moved job %s: %w", ds[i].Job.ID, err)
			}
		}
	}
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

// copyFieldCount is how many headers a scheduled copy sets itself.
const copyFieldCount = 10

// copyFields returns the subject of the scheduled copy of a deferred job
// and the headers it sets itself, as (key, value) pairs; besides them it
// carries the job's own headers but those JetStream acts on (Nats-*).
func (d ScheduleDeferrer) copyFields(df Deferral, now time.Time) (string, [copyFieldCount][2]string) {
	job := df.Job
	move := strconv.Itoa(job.Deferrals + 1)
	slot := now.Add(df.Wait)
	return d.Subjects.Copy(job.Tenant, job.OriginalSequence()), [copyFieldCount][2]string{
		{header.JobID, job.ID},
		{header.Subject, job.Subject},
		{header.Deferrals, move},
		{header.Published, job.Published.UTC().Format(time.RFC3339Nano)},
		{header.Slot, strconv.FormatInt(slot.UnixMicro(), 10)},
		{header.WaitReason, df.Reason},
		{header.WaitUntil, slot.UTC().Format(time.RFC3339Nano)},
		{jetstream.MsgIDHeader, "sched:" + job.ID + ":" + move},
		{jetstream.ScheduleHeader, "@at " + fireAt(now, d.stayFor(df.Wait)).Format(time.RFC3339Nano)},
		{jetstream.ScheduleTargetHeader, job.Subject},
	}
}

// copyOf builds the scheduled copy of a deferred job.
func (d ScheduleDeferrer) copyOf(df Deferral, now time.Time) *nats.Msg {
	subject, own := d.copyFields(df, now)
	out := &nats.Msg{Subject: subject, Data: df.Msg.Data(), Header: nats.Header{}}
	header.Copy(out.Header, df.Msg.Headers())
	out.Header.Del(fastcopy.Header) // see leftOutOfCopy
	out.Header.Del(header.Woken)
	for _, kv := range own {
		out.Header.Set(kv[0], kv[1])
	}
	return out
}

// leftOutOfCopy reports whether a scheduled copy leaves out the job's
// header k: a header JetStream acts on, or the fast copy's or woken job's
// mark (a moved copy is a copy of its own, with an incarnation of its own,
// back on the job's subject).
func leftOutOfCopy(k string) bool {
	return strings.HasPrefix(k, "Nats-") || k == fastcopy.Header || k == header.Woken
}

// maxBundleBytes caps the data of one bundle, well under NATS' default
// 1 MB payload limit.
const maxBundleBytes = 256 << 10

// bundleRun is how many of ds, from the first, go into one bundle: the
// following jobs of the same tenant, up to Bundle jobs, maxBundleBytes of
// copies and half the server's limit (when known).
func (d ScheduleDeferrer) bundleRun(ds []Deferral, limit int64) int {
	if d.Bundle < 2 || ds[0].Park {
		// A parked job is woken by its own subject (Waker): never bundled.
		return 1
	}
	most := maxBundleBytes
	if limit > 0 {
		most = min(most, int(limit/2))
	}
	size := func(df Deferral) int { return bundle.CopySize(df.Job.Subject, df.Msg.Headers(), nil, df.Msg.Data()) }
	n, total := 1, size(ds[0])
	for n < len(ds) && n < d.Bundle && ds[n].Job.Tenant == ds[0].Job.Tenant && !ds[n].Park {
		total += size(ds[n])
		if total > most {
			break
		}
		n++
	}
	return n
}

// bundleOf builds one scheduled message carrying the scheduled copies of
// several jobs of one tenant, marked with header.Bundle. It fires at the
// earliest of their slots onto its unpack subject, where RunUnbundler
// publishes the copies it carries, each scheduled for its own slot.
func (d ScheduleDeferrer) bundleOf(ds []Deferral, now time.Time) *nats.Msg {
	soonest, latest := d.stayFor(ds[0].Wait), ds[0].Wait
	subjects := make([]string, len(ds))
	own := make([][copyFieldCount][2]string, len(ds))
	size := 0
	var reasons []string
	for k, df := range ds {
		subjects[k], own[k] = d.copyFields(df, now)
		size += bundle.CopySize(subjects[k], df.Msg.Headers(), own[k][:], df.Msg.Data())
		soonest, latest = min(soonest, d.stayFor(df.Wait)), max(latest, df.Wait)
		if !slices.Contains(reasons, df.Reason) {
			reasons = append(reasons, df.Reason)
		}
	}
	data := bundle.AppendStart(make([]byte, 0, bundle.StartSize+size), len(ds))
	for k, df := range ds {
		data = bundle.AppendCopy(data, subjects[k], df.Msg.Headers(), leftOutOfCopy, own[k][:], df.Msg.Data())
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
	out.Header.Set(header.Bundle, strconv.Itoa(len(ds)))
	// What `nats stream get` shows of the bundle: why its jobs wait, and
	// until when the last of them does (each copy inside says its own).
	out.Header.Set(header.WaitReason, strings.Join(reasons, "; "))
	out.Header.Set(header.WaitUntil, now.Add(latest).UTC().Format(time.RFC3339Nano))
	out.Header.Set(header.JobID, job.ID)
	out.Header.Set(header.Subject, job.Subject)
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

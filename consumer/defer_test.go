package consumer

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/bundle"
	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/subject"
)

func TestFairDeferrerMovesLongWaits(t *testing.T) {
	tests := []struct {
		name string
		wait time.Duration
		want bool
	}{
		{name: "no wait", wait: 0, want: false},
		{name: "short", wait: 10 * time.Millisecond, want: false},
		{name: "just below MoveAfter", wait: 2*time.Second - time.Nanosecond, want: false},
		{name: "MoveAfter", wait: 2 * time.Second, want: true},
		{name: "above MoveAfter", wait: time.Hour, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &FairDeferrer{MoveAfter: 2 * time.Second, TenantShare: 100}
			if got := f.shouldMove("acme", tt.wait); got != tt.want {
				t.Fatalf("shouldMove(%s) = %v, want %v", tt.wait, got, tt.want)
			}
		})
	}
}

func TestFairDeferrerMovesDoNotTakeShare(t *testing.T) {
	f := &FairDeferrer{MoveAfter: time.Second, TenantShare: 1}
	for i := range 10 {
		if !f.shouldMove("acme", time.Minute) {
			t.Fatalf("long wait %d: shouldMove = false, want true", i)
		}
	}
	if f.shouldMove("acme", time.Millisecond*500) {
		t.Fatal("short wait after moves: shouldMove = true, want false: moves must not book the NAK share")
	}
}

func TestFairDeferrerTenantShare(t *testing.T) {
	const share = 3
	f := &FairDeferrer{MoveAfter: time.Hour, TenantShare: share}
	for i := range share {
		if f.shouldMove("noisy", time.Minute) {
			t.Fatalf("noisy job %d of its share %d: shouldMove = true, want false", i+1, share)
		}
	}
	for i := range 3 {
		if !f.shouldMove("noisy", time.Minute) {
			t.Fatalf("noisy job %d past its share: shouldMove = false, want true", i+1)
		}
	}
	// Another tenant has a share of its own.
	for i := range share {
		if f.shouldMove("quiet", time.Minute) {
			t.Fatalf("quiet job %d of its share %d: shouldMove = true, want false", i+1, share)
		}
	}
	if !f.shouldMove("quiet", time.Minute) {
		t.Fatal("quiet job past its share: shouldMove = false, want true")
	}
	// A wait at or above MoveAfter still moves.
	if !f.shouldMove("third", time.Hour) {
		t.Fatal("long wait: shouldMove = false, want true")
	}
}

func TestFairDeferrerShareFreesAfterWait(t *testing.T) {
	const wait = 20 * time.Millisecond
	f := &FairDeferrer{MoveAfter: time.Hour, TenantShare: 2}
	start := time.Now()
	for i := range 2 {
		if f.shouldMove("acme", wait) {
			t.Fatalf("job %d: shouldMove = true, want false", i+1)
		}
	}
	if !f.shouldMove("acme", wait) {
		t.Fatal("job past the share: shouldMove = false, want true")
	}
	testenv.Eventually(t, 5*time.Second, "acme to NAK again", func() bool {
		return !f.shouldMove("acme", wait)
	})
	if waited := time.Since(start); waited < wait {
		t.Fatalf("share freed after %s, before the booked wait %s passed", waited, wait)
	}
}

func TestFairDeferrerDefaults(t *testing.T) {
	f := &FairDeferrer{}
	if !f.shouldMove("a", 5*time.Second) {
		t.Fatal("default MoveAfter: shouldMove(5s) = false, want true")
	}
	if f.shouldMove("a", 5*time.Second-time.Nanosecond) {
		t.Fatal("default MoveAfter: shouldMove(5s-1ns) = true, want false")
	}
	for i := range 50 {
		if f.shouldMove("b", time.Second) {
			t.Fatalf("default TenantShare: job %d: shouldMove = true, want false", i+1)
		}
	}
	if !f.shouldMove("b", time.Second) {
		t.Fatal("default TenantShare: job 51: shouldMove = false, want true")
	}
}

// TestFairDeferrerConcurrentShare runs shouldMove from many goroutines:
// exactly TenantShare of them may NAK (run with -race).
func TestFairDeferrerConcurrentShare(t *testing.T) {
	const share, callers = 10, 200
	f := &FairDeferrer{MoveAfter: time.Hour, TenantShare: share}
	var naks atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			if !f.shouldMove("acme", time.Minute) {
				naks.Add(1)
			}
		})
	}
	wg.Wait()
	if got := naks.Load(); got != share {
		t.Fatalf("%d concurrent callers NAK'd %d jobs, want TenantShare = %d", callers, got, share)
	}
}

// TestFairDeferrerForgetsIdleTenants checks that tenants with nothing
// waiting do not pile up in memory once more than 1024 are known.
func TestFairDeferrerForgetsIdleTenants(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := &FairDeferrer{MoveAfter: 2 * time.Hour, TenantShare: 1, Now: func() time.Time { return now }}
	const idle = 1100
	for i := range idle {
		if f.shouldMove("idle-"+strconv.Itoa(i), time.Millisecond) {
			t.Fatalf("idle tenant %d: shouldMove = true, want false", i)
		}
	}
	// Their waits are long over; the next booking a second later prunes.
	now = now.Add(2 * time.Second)
	f.shouldMove("fresh", time.Hour)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.waiting) != 1 {
		t.Fatalf("%d tenants remembered, want only the one with a job waiting", len(f.waiting))
	}
}

func TestFairDeferrerDeferRoutes(t *testing.T) {
	move := &recordingDeferrer{mark: func(d *Deferral) { d.Moved = true }}
	f := &FairDeferrer{Move: move, MoveAfter: time.Second, TenantShare: 1}
	msgs := make([]*deferTestMsg, 5)
	ds := make([]Deferral, 5)
	for i, spec := range []struct {
		tenant string
		wait   time.Duration
	}{
		{"a", 100 * time.Millisecond}, // NAK: a's share
		{"a", 200 * time.Millisecond}, // move: a's share is taken
		{"b", 2 * time.Second},        // move: long wait
		{"b", 300 * time.Millisecond}, // NAK: b's share
		{"c", time.Second},            // move: exactly MoveAfter
	} {
		msgs[i] = &deferTestMsg{subject: "jobs." + spec.tenant}
		ds[i] = Deferral{Msg: msgs[i], Job: Job{ID: "JOBS:" + strconv.Itoa(i), Tenant: spec.tenant}, Wait: spec.wait}
	}
	f.Defer(context.Background(), ds)

	wantMoved := []bool{false, true, true, false, true}
	for i := range ds {
		if ds[i].Moved != wantMoved[i] {
			t.Fatalf("deferral %d: Moved = %v, want %v", i, ds[i].Moved, wantMoved[i])
		}
		if ds[i].Err != nil {
			t.Fatalf("deferral %d: Err = %v", i, ds[i].Err)
		}
		var wantNaks []time.Duration
		if !wantMoved[i] {
			wantNaks = []time.Duration{nakDelay(ds[i].Wait)}
		}
		if !reflect.DeepEqual(msgs[i].naks, wantNaks) {
			t.Fatalf("deferral %d: NakWithDelay calls %v, want %v", i, msgs[i].naks, wantNaks)
		}
	}
	if want := []string{"JOBS:1", "JOBS:2", "JOBS:4"}; !reflect.DeepEqual(move.ids, want) {
		t.Fatalf("Move got jobs %v, want %v in order", move.ids, want)
	}
}

// TestFairDeferrerMovesMessagesTheStreamWouldDrop: with the stream's
// MaxAge set, a short wait is NAK'd only while the message would come back
// younger than half of it; otherwise the job is moved, its copy being a new
// message.
func TestFairDeferrerMovesMessagesTheStreamWouldDrop(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name   string
		maxAge time.Duration
		stored time.Time
		wait   time.Duration
		moved  bool
	}{
		{"no max age", 0, now.Add(-time.Hour), time.Second, false},
		{"young enough", 10 * time.Second, now.Add(-time.Second), time.Second, false},
		{"would pass half the max age", 10 * time.Second, now.Add(-4 * time.Second), 1500 * time.Millisecond, true},
		{"already past it", 10 * time.Second, now.Add(-6 * time.Second), time.Millisecond, true},
		{"the wait alone passes it", 10 * time.Second, now, 5*time.Second + time.Millisecond, true},
		{"no metadata", 10 * time.Second, time.Time{}, time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			move := &recordingDeferrer{mark: func(d *Deferral) { d.Moved = true }}
			f := &FairDeferrer{Move: move, MoveAfter: time.Hour, TenantShare: 100, MaxAge: tt.maxAge}
			ds := []Deferral{{Msg: &deferTestMsg{stored: tt.stored}, Job: Job{ID: "JOBS:1", Tenant: "a"}, Wait: tt.wait}}
			f.Defer(context.Background(), ds)
			if ds[0].Moved != tt.moved {
				t.Fatalf("Moved = %v, want %v", ds[0].Moved, tt.moved)
			}
		})
	}
}

// TestFairDeferrerMovesWhenTheConsumerIsCrowded: from crowdedAt pending
// messages on, where a NAK delay would lose its precision, even a short
// wait is moved; below it, a short wait is NAK'd.
func TestFairDeferrerMovesWhenTheConsumerIsCrowded(t *testing.T) {
	for _, tc := range []struct {
		pending int
		moved   bool
	}{{-1, false}, {crowdedAt - 1, false}, {crowdedAt, true}, {20000, true}} {
		move := &recordingDeferrer{mark: func(d *Deferral) { d.Moved = true }}
		f := &FairDeferrer{Move: move, MoveAfter: time.Hour, TenantShare: 100, AckPending: func() int { return tc.pending }}
		ds := []Deferral{{Msg: &deferTestMsg{}, Job: Job{ID: "JOBS:1", Tenant: "a"}, Wait: time.Millisecond}}
		f.Defer(context.Background(), ds)
		if ds[0].Moved != tc.moved {
			t.Errorf("%d pending: moved %v, want %v", tc.pending, ds[0].Moved, tc.moved)
		}
	}
}

// TestFairDeferrerCapsTheWorkersNakedJobs: past MaxNaked NAK'd jobs of all
// tenants on this worker, every job is moved, until some come back.
func TestFairDeferrerCapsTheWorkersNakedJobs(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := &FairDeferrer{MoveAfter: time.Hour, TenantShare: 100, MaxNaked: 3, Now: func() time.Time { return now }}
	for i, tenant := range []string{"a", "b", "c"} {
		if f.shouldMove(tenant, time.Second*time.Duration(i+1)) {
			t.Fatalf("job %d of %d NAK'd jobs moved", i+1, 3)
		}
	}
	if !f.shouldMove("d", time.Second) {
		t.Fatal("a fourth tenant's job NAK'd past MaxNaked")
	}
	now = now.Add(time.Second) // a's job came back
	if f.shouldMove("d", time.Second) {
		t.Fatal("moved with room under MaxNaked again")
	}
}

func TestFairDeferrerDeferKeepsErrors(t *testing.T) {
	boom := errors.New("boom")
	move := &recordingDeferrer{mark: func(d *Deferral) { d.Err = boom }}
	nakErr := errors.New("nak failed")
	f := &FairDeferrer{Move: move, MoveAfter: time.Second}
	ds := []Deferral{
		{Msg: &deferTestMsg{nakErr: nakErr}, Job: Job{ID: "JOBS:1", Tenant: "a"}, Wait: time.Millisecond},
		{Msg: &deferTestMsg{}, Job: Job{ID: "JOBS:2", Tenant: "a"}, Wait: time.Minute},
	}
	f.Defer(context.Background(), ds)
	if !errors.Is(ds[0].Err, nakErr) {
		t.Fatalf("NAK'd deferral: Err = %v, want %v", ds[0].Err, nakErr)
	}
	if !errors.Is(ds[1].Err, boom) {
		t.Fatalf("moved deferral: Err = %v, want %v", ds[1].Err, boom)
	}
}

func TestScheduleDeferrerCopyOf(t *testing.T) {
	published := time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.FixedZone("+02:00", 2*3600))
	now := time.Date(2025, 6, 1, 12, 0, 0, 250_000_000, time.UTC)
	tests := []struct {
		name    string
		subject string
		header  nats.Header
		job     Job
		now     time.Time
		wait    time.Duration
		reason  string
		maxWait time.Duration
		want    nats.Header // headers besides the source's non-Nats ones
	}{
		{
			name:    "first move",
			subject: "jobs.acme.send",
			header: nats.Header{
				jetstream.MsgIDHeader:          {"orig-1"},
				jetstream.ExpectedStreamHeader: {"JOBS"},
				"Job-Cost":                     {"3"},
				"X-Multi":                      {"a", "b"},
			},
			job:    Job{ID: "JOBS:7", Subject: "jobs.acme.send", Tenant: "acme", Published: published},
			now:    now,
			wait:   1500*time.Millisecond + 3*time.Microsecond,
			reason: "limit 10/s:20",
			want: nats.Header{
				"Job-Cost":                     {"3"},
				"X-Multi":                      {"a", "b"},
				header.JobID:                   {"JOBS:7"},
				header.Subject:                 {"jobs.acme.send"},
				header.Deferrals:               {"1"},
				header.Published:               {"2025-01-02T01:04:05.123456789Z"},
				header.Slot:                    {strconv.FormatInt(time.Date(2025, 6, 1, 12, 0, 1, 750_003_000, time.UTC).UnixMicro(), 10)},
				header.WaitReason:              {"limit 10/s:20"},
				header.WaitUntil:               {"2025-06-01T12:00:01.750003Z"},
				jetstream.MsgIDHeader:          {"sched:JOBS:7:1"},
				jetstream.ScheduleHeader:       {"@at 2025-06-01T12:00:01.752Z"}, // slot + 1 ms, rounded up
				jetstream.ScheduleTargetHeader: {"jobs.acme.send"},
			},
		},
		{
			// A fired copy comes back on the job's subject carrying the
			// previous move's headers; the new copy replaces them.
			name:    "second move of a fired copy",
			subject: "jobs.acme.send",
			header: nats.Header{
				header.JobID:                   {"JOBS:7"},
				header.Subject:                 {"jobs.acme.send"},
				header.Deferrals:               {"1"},
				header.Published:               {"2025-01-02T01:04:05.123456789Z"},
				header.Slot:                    {"1"},
				jetstream.MsgIDHeader:          {"sched:JOBS:7:1"},
				jetstream.ScheduleHeader:       {"@at 2025-06-01T12:00:02Z"},
				jetstream.ScheduleTargetHeader: {"jobs.acme.send"},
				"Nats-Scheduler":               {"sched.JOBS_7"},
			},
			job:    Job{ID: "JOBS:7", Subject: "jobs.acme.send", Tenant: "acme", Deferrals: 1, Published: published},
			now:    now.Add(time.Minute),
			wait:   2 * time.Second,
			reason: "handler failed 1 of 5 times",
			want: nats.Header{
				header.JobID:                   {"JOBS:7"},
				header.Subject:                 {"jobs.acme.send"},
				header.Deferrals:               {"2"},
				header.Published:               {"2025-01-02T01:04:05.123456789Z"},
				header.Slot:                    {strconv.FormatInt(now.Add(time.Minute+2*time.Second).UnixMicro(), 10)},
				header.WaitReason:              {"handler failed 1 of 5 times"},
				header.WaitUntil:               {"2025-06-01T12:01:02.25Z"},
				jetstream.MsgIDHeader:          {"sched:JOBS:7:2"},
				jetstream.ScheduleHeader:       {"@at 2025-06-01T12:01:02.251Z"},
				jetstream.ScheduleTargetHeader: {"jobs.acme.send"},
			},
		},
		{
			name:    "whole-millisecond slot in another zone",
			subject: "jobs.b.x",
			job: Job{ID: "JOBS:9", Subject: "jobs.b.x", Tenant: "b", Deferrals: 4,
				Published: time.Date(2025, 6, 1, 11, 0, 0, 0, time.UTC)},
			now:    time.Date(2025, 6, 1, 14, 0, 0, 0, time.FixedZone("+02:00", 2*3600)),
			wait:   3 * time.Second,
			reason: "the slot it holds",
			want: nats.Header{
				header.JobID:                   {"JOBS:9"},
				header.Subject:                 {"jobs.b.x"},
				header.Deferrals:               {"5"},
				header.Published:               {"2025-06-01T11:00:00Z"},
				header.Slot:                    {strconv.FormatInt(time.Date(2025, 6, 1, 12, 0, 3, 0, time.UTC).UnixMicro(), 10)},
				header.WaitReason:              {"the slot it holds"},
				header.WaitUntil:               {"2025-06-01T12:00:03Z"},
				jetstream.MsgIDHeader:          {"sched:JOBS:9:5"},
				jetstream.ScheduleHeader:       {"@at 2025-06-01T12:00:03.001Z"},
				jetstream.ScheduleTargetHeader: {"jobs.b.x"},
			},
		},
	}
	tests = append(tests, tests[0])
	last := &tests[len(tests)-1]
	last.name, last.maxWait, last.wait = "a wait past MaxWait comes back early, keeping its slot", 2*time.Second, 9*time.Second
	last.want = cloneHeader(last.want)
	last.want.Set(header.Slot, strconv.FormatInt(now.Add(9*time.Second).UnixMicro(), 10))
	last.want.Set(header.WaitUntil, "2025-06-01T12:00:09.25Z")
	last.want.Set(jetstream.ScheduleHeader, "@at 2025-06-01T12:00:02.251Z") // now + MaxWait + 1 ms
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := ScheduleDeferrer{MaxWait: tt.maxWait, Subjects: "sched"}
			src := &deferTestMsg{subject: tt.subject, data: []byte("payload"), header: cloneHeader(tt.header)}
			out := d.copyOf(Deferral{Msg: src, Job: tt.job, Wait: tt.wait, Reason: tt.reason}, tt.now)

			if want := subject.Schedules("sched").Copy(tt.job.Tenant, tt.job.OriginalSequence()); out.Subject != want {
				t.Fatalf("Subject = %q, want %q", out.Subject, want)
			}
			if string(out.Data) != "payload" {
				t.Fatalf("Data = %q, want %q", out.Data, "payload")
			}
			if !reflect.DeepEqual(out.Header, tt.want) {
				t.Fatalf("headers:\n got %v\nwant %v", out.Header, tt.want)
			}
			if !reflect.DeepEqual(src.header, tt.header) {
				t.Fatalf("copyOf changed the source headers: %v, was %v", src.header, tt.header)
			}
			if _, err := time.Parse(time.RFC3339Nano, out.Header.Get(header.Published)); err != nil {
				t.Fatalf("%s does not parse back: %v", header.Published, err)
			}
		})
	}
}

// recordingDeferrer is a Deferrer that records the jobs it gets, in order,
// and applies mark to each.
type recordingDeferrer struct {
	mark func(*Deferral)
	ids  []string
}

func (r *recordingDeferrer) Defer(_ context.Context, ds []Deferral) {
	for i := range ds {
		r.ids = append(r.ids, ds[i].Job.ID)
		r.mark(&ds[i])
	}
}

// deferTestMsg is a jetstream.Msg with a subject, data and headers that
// records NakWithDelay. It stands in for a delivered message where only
// those matter; it says nothing about how NATS behaves.
type deferTestMsg struct {
	subject string
	data    []byte
	header  nats.Header
	stored  time.Time // the metadata's timestamp; zero: no metadata
	nakErr  error
	naks    []time.Duration
}

var _ jetstream.Msg = (*deferTestMsg)(nil)

func (m *deferTestMsg) Metadata() (*jetstream.MsgMetadata, error) {
	if m.stored.IsZero() {
		return nil, nil
	}
	return &jetstream.MsgMetadata{Timestamp: m.stored}, nil
}
func (m *deferTestMsg) Data() []byte                    { return m.data }
func (m *deferTestMsg) Headers() nats.Header            { return m.header }
func (m *deferTestMsg) Subject() string                 { return m.subject }
func (m *deferTestMsg) Reply() string                   { return "" }
func (m *deferTestMsg) Ack() error                      { return nil }
func (m *deferTestMsg) DoubleAck(context.Context) error { return nil }
func (m *deferTestMsg) Nak() error                      { return nil }
func (m *deferTestMsg) InProgress() error               { return nil }
func (m *deferTestMsg) Term() error                     { return nil }
func (m *deferTestMsg) TermWithReason(string) error     { return nil }
func (m *deferTestMsg) NakWithDelay(d time.Duration) error {
	m.naks = append(m.naks, d)
	return m.nakErr
}

// cloneHeader deep-copies h, keeping nil as nil.
func cloneHeader(h nats.Header) nats.Header {
	if h == nil {
		return nil
	}
	out := make(nats.Header, len(h))
	for k, vs := range h {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

// TestBundleOf: a bundle of a tenant's deferred jobs is one scheduled
// message on prefix.b.<tenant>.<id> that fires at the earliest slot onto
// prefix.u.<tenant>.<id>, and carries exactly the copies copyOf builds.
func TestBundleOf(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 600_000_000, time.UTC)
	d := ScheduleDeferrer{Subjects: "sched", Bundle: 64}
	var ds []Deferral
	for i, wait := range []time.Duration{3 * time.Second, time.Second, 2 * time.Second} {
		id := fmt.Sprintf("JOBS:%d", 10+i)
		// The second job is a fired copy: the copy in the bundle drops the
		// headers JetStream acts on and replaces the previous move's own,
		// and keeps the job's.
		var hdr nats.Header
		if i == 1 {
			hdr = nats.Header{
				jetstream.MsgIDHeader: {"sched:" + id + ":1"}, "Nats-Scheduler": {"sched.acme.11"},
				header.JobID: {id}, header.Deferrals: {"1"}, header.Slot: {"1"}, header.Tenant: {"acme"},
				"X-Multi": {"a", "b"}, "x-lower": {"c"},
			}
		}
		reason := "limit 1/s:1"
		if i == 1 {
			reason = "the slot it holds"
		}
		ds = append(ds, Deferral{Msg: &deferTestMsg{subject: "jobs.acme", data: []byte(id), header: hdr},
			Job: Job{ID: id, Tenant: "acme", Subject: "jobs.acme", Published: now, Deferrals: min(i, 1)}, Wait: wait, Reason: reason})
	}
	if n := d.bundleRun(ds, 0); n != 3 {
		t.Fatalf("bundleRun = %d, want 3", n)
	}
	out := d.bundleOf(ds, now)
	name := "JOBS-10-" + bundleDigest(ds)
	if out.Subject != "sched.b.acme."+name {
		t.Fatalf("subject %q", out.Subject)
	}
	want := map[string]string{
		header.Bundle:                  "3",
		header.WaitReason:              "limit 1/s:1; the slot it holds", // each reason once
		header.WaitUntil:               "2026-01-02T03:04:08.6Z",         // the last slot
		jetstream.ScheduleHeader:       "@at 2026-01-02T03:04:06.601Z",   // now + 1 s + 1 ms
		jetstream.ScheduleTargetHeader: "sched.u.acme." + name,
		jetstream.MsgIDHeader:          "bundle:" + name,
	}
	// The digest names the contents: the same jobs give the same bundle
	// (deduplicated if stored again); other jobs behind the same first job,
	// or the same jobs moved once more, give another.
	if again := d.bundleOf(ds, now.Add(time.Second)); again.Header.Get(jetstream.MsgIDHeader) != want[jetstream.MsgIDHeader] {
		t.Errorf("the same jobs bundled again: id %q, want %q", again.Header.Get(jetstream.MsgIDHeader), want[jetstream.MsgIDHeader])
	}
	other := slices.Clone(ds)
	other[2].Job.ID = "JOBS:99"
	moved := slices.Clone(ds)
	moved[1].Job.Deferrals++
	for what, v := range map[string][]Deferral{"other jobs": other, "a job moved once more": moved, "fewer jobs": ds[:2]} {
		b := d.bundleOf(v, now)
		if b.Subject == out.Subject || b.Header.Get(jetstream.MsgIDHeader) == want[jetstream.MsgIDHeader] {
			t.Errorf("%s behind the same first job: subject %q and id %q, want others than the first bundle's", what, b.Subject, b.Header.Get(jetstream.MsgIDHeader))
		}
	}
	for k, v := range want {
		if got := out.Header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	copies, err := bundle.Copies(out.Data)
	if err != nil {
		t.Fatalf("bundle data: %v", err)
	}
	if len(copies) != 3 {
		t.Fatalf("%d copies, want 3", len(copies))
	}
	for k, c := range copies {
		one := d.copyOf(ds[k], now)
		if c.Subject != one.Subject || string(c.Data) != string(one.Data) || !reflect.DeepEqual(c.Header, one.Header) {
			t.Errorf("copy %d = %+v, want %+v", k, c, one)
		}
	}
	if got := copies[1].Header; got.Get(header.Deferrals) != "2" || got.Get("Nats-Scheduler") != "" ||
		!reflect.DeepEqual(got["X-Multi"], []string{"a", "b"}) || got.Get("x-lower") != "c" || got.Get(header.Tenant) != "acme" {
		t.Errorf("copy of a fired copy: headers %v", got)
	}
	// Another tenant, or bundling off, ends a bundle.
	ds[1].Job.Tenant = "globex"
	if n := d.bundleRun(ds, 0); n != 1 {
		t.Errorf("bundleRun across tenants = %d, want 1", n)
	}
	d.Bundle = 0
	if n := d.bundleRun(ds[:1], 0); n != 1 {
		t.Errorf("bundleRun with bundling off = %d, want 1", n)
	}
}

package consumer

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/throttle"
)

// moveEnv is a workerEnv whose limited jobs must wait 3 s and are moved by
// a ScheduleDeferrer counting from now.
func moveEnv(t *testing.T, now time.Time) *workerEnv {
	t.Helper()
	e := setup(t)
	clk := &fakeClock{now: now}
	e.params.Deferrer = ScheduleDeferrer{JetStream: e.js, Subjects: "sched", Now: clk.Now}
	e.decider.decide = func(context.Context, throttle.Copy) throttle.Result {
		return result(throttle.Reserved, 3*time.Second)
	}
	return e
}

// TestMoveStoresTheCopyThenAcksTheOriginal: a job moved off the consumer
// is published as a scheduled copy that fires onto the job's subject at
// its slot (one millisecond past it) and keeps the job's identity; the
// original is acked only once the copy is stored.
func TestMoveStoresTheCopyThenAcksTheOriginal(t *testing.T) {
	now := time.Date(2026, 3, 4, 5, 6, 17, 0, time.UTC)
	e := moveEnv(t, now)
	e.start()
	m := newMsg(1, "jobs.acme", "X-Trace", "t1", jetstream.MsgIDHeader, "client-1")
	e.push(m)
	e.waitSettled(m)
	e.stop()

	wantSettled(t, m, ack)
	copies := e.js.copies()
	if len(copies) != 1 {
		t.Fatalf("%d copies published, want 1", len(copies))
	}
	c := copies[0]
	if c.Subject != "sched.acme.1" || string(c.Data) != string(m.data) {
		t.Errorf("copy on %q with data %q, want on sched.acme.1 with the job's %q", c.Subject, c.Data, m.data)
	}
	for k, v := range map[string]string{
		jetstream.ScheduleHeader:       "@at 2026-03-04T05:06:20.001Z",
		jetstream.ScheduleTargetHeader: "jobs.acme",
		jetstream.MsgIDHeader:          "sched:JOBS:1:1",
		header.JobID:                   "JOBS:1",
		header.Subject:                 "jobs.acme",
		header.Deferrals:               "1",
		header.Published:               stored.Format(time.RFC3339Nano),
		header.Slot:                    strconv.FormatInt(now.Add(3*time.Second).UnixMicro(), 10),
		"X-Trace":                      "t1",
	} {
		if got := c.Header.Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("copy header %s = %q, want %q", k, got, v)
		}
	}
	if !e.log.before("publish sched.acme.1", "JOBS:1 ack") {
		t.Errorf("events %v, want the copy stored before the original is acked", e.log)
	}
	if s := e.stats("acme"); s.Deferred != 1 || s.Moved != 1 || s.Admitted != 0 {
		t.Errorf("stats %+v, want one deferred and moved, none admitted", s)
	}
}

// TestMoveThatCannotStoreTheCopyNaksWithTheWait: when the copy's publish
// fails, or its ack reports an error, the original is NAK'd for its wait
// instead: never acked, never lost.
func TestMoveThatCannotStoreTheCopyNaksWithTheWait(t *testing.T) {
	tests := []struct {
		name             string
		asyncErr, ackErr error
	}{
		{name: "publish refused", asyncErr: errors.New("nats: too many outstanding async publishes")},
		{name: "publish not stored", ackErr: errors.New("nats: maximum messages exceeded")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := moveEnv(t, time.Date(2026, 3, 4, 5, 6, 17, 0, time.UTC))
			e.js.asyncErr, e.js.ackErr = tt.asyncErr, tt.ackErr
			e.start()
			m := newMsg(1, "jobs.acme")
			e.push(m)
			e.waitSettled(m)
			e.stop()

			wantSettled(t, m, nakAfter(3*time.Second+time.Millisecond))
			if n := len(e.js.copies()); n != 1 {
				t.Errorf("%d copies tried, want 1", n)
			}
			if s := e.stats("acme"); s.Deferred != 1 || s.Moved != 0 {
				t.Errorf("stats %+v, want one deferred, none moved", s)
			}
		})
	}
}

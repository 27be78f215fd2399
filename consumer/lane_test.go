package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/fastlane/fastcopy"
	"github.com/throttler/throttler/header"
)

// fakeLane is a Lane whose copies come from a fake consumer of their own;
// it records what the worker tells it.
type fakeLane struct {
	copies *fakeConsumer
}

func (l *fakeLane) Run(ctx context.Context)                   { <-ctx.Done() }
func (l *fakeLane) Observe(uint64, uint64)                    {}
func (l *fakeLane) Pause(deferred, decided int) time.Duration { return 0 }
func (l *fakeLane) Copies() jetstream.Consumer                { return l.copies }

// TestPreAdmittedCopyRunsWithoutADecision: a copy the lane admitted (and
// charged) runs on its first delivery without being decided again; on a
// redelivery, or when the lane only reserved its slot, it is decided as
// usual.
func TestPreAdmittedCopyRunsWithoutADecision(t *testing.T) {
	e := setup(t)
	lane := &fakeLane{copies: newFakeConsumer()}
	e.params.Lane = lane
	e.start()

	admitted := newMsg(7, "sched.f.acme.3", header.JobID, "JOBS:3", header.Subject, "jobs.acme", fastcopy.Header, fastcopy.Admitted)
	reserved := newMsg(8, "sched.f.acme.4", header.JobID, "JOBS:4", header.Subject, "jobs.acme", fastcopy.Header, fastcopy.Reserved)
	again := newMsg(9, "sched.f.acme.5", header.JobID, "JOBS:5", header.Subject, "jobs.acme", fastcopy.Header, fastcopy.Admitted).redelivered()
	lane.copies.push(admitted, reserved, again)
	for _, m := range []*fakeMsg{admitted, reserved, again} {
		e.waitSettled(m)
		wantSettled(t, m, ack)
	}
	e.stop()

	decided := map[string]bool{}
	for _, c := range e.decider.asked() {
		decided[c.JobID] = true
	}
	if decided["JOBS:3"] || !decided["JOBS:4"] || !decided["JOBS:5"] {
		t.Fatalf("jobs decided: %v; want JOBS:4 and JOBS:5 only (JOBS:3 was admitted by the lane)", decided)
	}
	if n := len(e.ran.all()); n != 3 {
		t.Fatalf("handler ran %d jobs, want 3", n)
	}
}

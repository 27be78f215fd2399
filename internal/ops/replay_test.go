package ops_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/internal/ops"
)

// jobsOn reads every message the jobs stream holds on subjects filter.
func (f *fixture) jobsOn(filter string) []*jetstream.RawStreamMsg {
	f.t.Helper()
	var out []*jetstream.RawStreamMsg
	for seq := uint64(1); ; seq++ {
		m, err := f.jobs.GetMsg(f.ctx, seq, jetstream.WithGetMsgSubject(filter))
		if err != nil {
			return out
		}
		out = append(out, m)
		seq = m.Sequence
	}
}

// TestReplayHeaders: a replayed job goes to its original subject with its
// data and its own headers (the tenant and cost headers the settings name
// too, whatever their names), without the worker's, marked with where it
// came from and a Nats-Msg-Id of the dead letter; its dead letter is
// removed. A dead letter cut to fit, and an unreadable bundle, are
// skipped and kept.
func TestReplayHeaders(t *testing.T) {
	f := setup(t)
	f.fleet.CostHeader = "Throttler-Cost" // a name in the worker's own prefix, kept all the same
	a := f.deadLetter("acme", "jobs.acme.mail", "handler failed", 5,
		nats.Header{"X-Order": {"1", "2"}, "Throttler-Cost": {"3"}, header.Deferrals: {"2"}, header.WaitReason: {"limit 1/s"}}, "payload")
	cut := f.deadLetter("acme", "jobs.acme.big", "too large", 0, nats.Header{header.Truncated: {"0 of 2000000 bytes"}}, "")
	bundle := f.deadLetter("acme", "jobs.acme.mail", "unreadable bundle of moved jobs: malformed bundle", 0, nats.Header{header.Bundle: {"3"}}, "\x01garbage")

	dry, err := ops.ReplayDeadLetters(f.ctx, f.fleet, ops.ReplayOptions{DryRun: true})
	if err != nil || len(dry.Replayed) != 1 || len(dry.Skipped) != 2 || len(f.jobsOn("jobs.>")) != 0 {
		t.Fatalf("dry run = %+v, %v; %d jobs stored", dry, err, len(f.jobsOn("jobs.>")))
	}
	rep, err := ops.ReplayDeadLetters(f.ctx, f.fleet, ops.ReplayOptions{})
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if len(rep.Replayed) != 1 || rep.Replayed[0].ID != a || rep.Replayed[0].Sequence == 0 || len(rep.Skipped) != 2 || rep.Skipped[0].ID != cut || rep.Skipped[1].ID != bundle {
		t.Fatalf("replay = %+v", rep)
	}
	if rep.DuplicateWindow <= 0 {
		t.Errorf("duplicate window %v, want the jobs stream's", rep.DuplicateWindow)
	}
	got := f.jobsOn("jobs.>")
	if len(got) != 1 {
		t.Fatalf("%d jobs stored, want 1", len(got))
	}
	m := got[0]
	if m.Subject != "jobs.acme.mail" || string(m.Data) != "payload" {
		t.Errorf("replayed to %s with %q", m.Subject, m.Data)
	}
	want := map[string]string{
		"X-Order":             "[1 2]",
		"Throttler-Cost":      "[3]",
		header.ReplayedFrom:   fmt.Sprintf("[JOBS_DLQ:%d]", a),
		jetstream.MsgIDHeader: fmt.Sprintf("[replay:JOBS_DLQ:%d]", a),
	}
	for k, v := range want {
		if fmt.Sprint(m.Header.Values(k)) != v {
			t.Errorf("header %s = %v, want %s", k, m.Header.Values(k), v)
		}
	}
	for _, k := range []string{header.Reason, header.JobID, header.Subject, header.Tenant, header.Failures, header.Deferrals, header.WaitReason} {
		if m.Header.Get(k) != "" {
			t.Errorf("replayed job kept the worker's header %s", k)
		}
	}
	left, _ := ops.ListDeadLetters(f.ctx, f.fleet, ops.DeadLetterFilter{})
	if len(left) != 2 || left[0].ID != cut || left[1].ID != bundle {
		t.Errorf("dead letters left: %v, want the cut one and the bundle", ids(left))
	}
}

// crashingJS cancels the replay's context after a number of publishes,
// as a replay killed after storing copies whose dead letters it has not
// removed yet.
type crashingJS struct {
	jetstream.JetStream
	after  int64
	n      atomic.Int64
	cancel context.CancelFunc
}

func (c *crashingJS) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	f, err := c.JetStream.PublishMsgAsync(m, opts...)
	if c.n.Add(1) == c.after {
		c.cancel()
	}
	return f, err
}

// TestReplayInterrupted: a replay stopped with copies stored and their
// dead letters not yet removed, then run again, replays every dead letter
// exactly once: the copies stored before the stop are not stored again.
func TestReplayInterrupted(t *testing.T) {
	f := setup(t)
	const n = 300
	for i := range n {
		f.deadLetter("acme", fmt.Sprintf("jobs.acme.%d", i), "failed", 1, nil, fmt.Sprint(i))
	}
	ctx, cancel := context.WithCancel(f.ctx)
	crash := &crashingJS{JetStream: f.js, after: 100, cancel: cancel}
	fl := f.fleet
	fl.JetStream = crash
	first, err := ops.ReplayDeadLetters(ctx, fl, ops.ReplayOptions{})
	if err == nil {
		t.Fatal("the interrupted replay reported no error")
	}
	stored := len(f.jobsOn("jobs.>"))
	left, _ := ops.ListDeadLetters(f.ctx, f.fleet, ops.DeadLetterFilter{})
	t.Logf("interrupted: %d reported replayed, %d stored, %d dead letters left", len(first.Replayed), stored, len(left))
	if stored+len(left) <= n {
		t.Fatalf("the interruption left no dead letter whose copy is stored (%d stored, %d left): the test shows nothing", stored, len(left))
	}

	second, err := ops.ReplayDeadLetters(f.ctx, f.fleet, ops.ReplayOptions{})
	if err != nil {
		t.Fatalf("second replay: %v", err)
	}
	again := 0
	for _, r := range second.Replayed {
		if r.Again {
			again++
		}
	}
	if again != stored+len(left)-n {
		t.Errorf("second replay found %d copies already stored, want %d", again, stored+len(left)-n)
	}
	seen := map[string]int{}
	for _, m := range f.jobsOn("jobs.>") {
		seen[string(m.Data)]++
	}
	for i := range n {
		if c := seen[fmt.Sprint(i)]; c != 1 {
			t.Errorf("job %d stored %d times, want once", i, c)
		}
	}
	if left, _ := ops.ListDeadLetters(f.ctx, f.fleet, ops.DeadLetterFilter{}); len(left) != 0 {
		t.Errorf("%d dead letters left", len(left))
	}
}

// TestReplayNamesMissingIDs: ids asked for that no dead letter has are
// reported as skipped, not left out of the answer.
func TestReplayNamesMissingIDs(t *testing.T) {
	f := setup(t)
	f.deadLetter("acme", "jobs.acme.1", "failed", 1, nil, "one")
	all, err := ops.ListDeadLetters(f.ctx, f.fleet, ops.DeadLetterFilter{})
	if err != nil || len(all) != 1 {
		t.Fatalf("dead letters %v, %v; want one", all, err)
	}
	rep, err := ops.ReplayDeadLetters(f.ctx, f.fleet, ops.ReplayOptions{DryRun: true, DeadLetterFilter: ops.DeadLetterFilter{IDs: []uint64{all[0].ID, 99999}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Replayed) != 1 || rep.Replayed[0].ID != all[0].ID {
		t.Errorf("replayed %+v, want dead letter %d", rep.Replayed, all[0].ID)
	}
	if len(rep.Skipped) != 1 || rep.Skipped[0].ID != 99999 || !strings.Contains(rep.Skipped[0].Why, "no such dead letter") {
		t.Errorf("skipped %+v, want 99999 named as missing", rep.Skipped)
	}
}

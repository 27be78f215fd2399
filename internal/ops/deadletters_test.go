package ops_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/internal/ops"
	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/tenant"
)

// fixture is a NATS server with a jobs stream and a dead-letter stream,
// and the Fleet that names them.
type fixture struct {
	t     *testing.T
	ctx   context.Context
	js    jetstream.JetStream
	fleet ops.Fleet
	jobs  jetstream.Stream
	dlq   jetstream.Stream
}

func setup(t *testing.T) *fixture {
	t.Helper()
	n := testenv.StartNATS(t, "")
	js, err := jetstream.New(n.Connect(t))
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	jobs, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.>", "sched.>"}, AllowMsgSchedules: true})
	if err != nil {
		t.Fatalf("jobs stream: %v", err)
	}
	dlq, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "JOBS_DLQ", Subjects: []string{"dlq.*"}})
	if err != nil {
		t.Fatalf("dlq stream: %v", err)
	}
	return &fixture{t: t, ctx: ctx, js: js, jobs: jobs, dlq: dlq, fleet: ops.Fleet{
		JetStream: js, Stream: "JOBS", Consumer: "throttler", Subjects: []string{"jobs.>"},
		Schedules: "sched", DLQ: "dlq.{tenant}", TenantFrom: tenant.FromSubject(2), CostHeader: "Job-Cost",
	}}
}

// deadLetter stores a dead letter as a worker makes it (consumer's
// deadletter.go): the job's data and headers, and the worker's own.
func (f *fixture) deadLetter(ten, subj, reason string, failures int, own nats.Header, data string) uint64 {
	f.t.Helper()
	h := nats.Header{}
	for k, vs := range own {
		h[k] = vs
	}
	h.Set(header.Subject, subj)
	h.Set(header.Reason, reason)
	h.Set(header.JobID, "JOBS:"+strconv.Itoa(len(data)+failures))
	if ten != "" {
		h.Set(header.Tenant, ten)
	} else {
		ten = tenant.Invalid
	}
	if failures > 0 {
		h.Set(header.Failures, strconv.Itoa(failures))
	}
	ack, err := f.js.PublishMsg(f.ctx, &nats.Msg{Subject: "dlq." + ten, Header: h, Data: []byte(data)})
	if err != nil {
		f.t.Fatalf("dead letter: %v", err)
	}
	return ack.Sequence
}

func ids(ds []ops.DeadLetter) []uint64 {
	out := []uint64{}
	for _, d := range ds {
		out = append(out, d.ID)
	}
	return out
}

// TestDeadLettersListShowPurge: the filters select by tenant, reason
// (any case), time and count; show returns the headers and the start of
// the data; purge removes only what it selects, and a dry run nothing.
func TestDeadLettersListShowPurge(t *testing.T) {
	f := setup(t)
	a1 := f.deadLetter("acme", "jobs.acme.mail", "handler failed 5 times: 503", 5, nats.Header{"X-Order": {"1"}}, "first")
	g1 := f.deadLetter("globex", "jobs.globex", "malformed cost \"x\"", 0, nil, "g")
	time.Sleep(20 * time.Millisecond) // the next ones are stored strictly later, for --since
	cut := time.Now()
	a2 := f.deadLetter("acme", "jobs.acme.sms", "Handler failed 5 times: timeout", 5, nil, "second, longer data")
	bad := f.deadLetter("", "jobs", "missing tenant: subject \"jobs\" has no token 2", 0, nil, "?")

	list := func(flt ops.DeadLetterFilter) []uint64 {
		t.Helper()
		ds, err := ops.ListDeadLetters(f.ctx, f.fleet, flt)
		if err != nil {
			t.Fatalf("list %+v: %v", flt, err)
		}
		return ids(ds)
	}
	for _, c := range []struct {
		flt  ops.DeadLetterFilter
		want []uint64
	}{
		{ops.DeadLetterFilter{}, []uint64{a1, g1, a2, bad}},
		{ops.DeadLetterFilter{Tenant: "acme"}, []uint64{a1, a2}},
		{ops.DeadLetterFilter{Tenant: tenant.Invalid}, []uint64{bad}},
		{ops.DeadLetterFilter{Reason: "HANDLER FAILED"}, []uint64{a1, a2}},
		{ops.DeadLetterFilter{Since: cut}, []uint64{a2, bad}},
		{ops.DeadLetterFilter{Limit: 2}, []uint64{a1, g1}},
		{ops.DeadLetterFilter{Tenant: "acme", Reason: "timeout"}, []uint64{a2}},
		{ops.DeadLetterFilter{Tenant: "nobody"}, []uint64{}},
	} {
		if got := list(c.flt); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("list %+v = %v, want %v", c.flt, got, c.want)
		}
	}
	ds, _ := ops.ListDeadLetters(f.ctx, f.fleet, ops.DeadLetterFilter{Tenant: "acme", Limit: 1})
	if d := ds[0]; d.Tenant != "acme" || d.Failures != 5 || d.Size != len("first") || d.Subject != "jobs.acme.mail" || d.Stream != "JOBS_DLQ" || d.Header != nil {
		t.Errorf("listed %+v", d)
	}

	d, err := ops.ShowDeadLetter(f.ctx, f.fleet, a2, 6)
	if err != nil {
		t.Fatalf("show: %v", err)
	}
	if string(d.Data) != "second" || d.DataCut != len("second, longer data")-6 || d.Header.Get(header.Reason) == "" {
		t.Errorf("show = data %q, cut %d, headers %v", d.Data, d.DataCut, d.Header)
	}
	if _, err := ops.ShowDeadLetter(f.ctx, f.fleet, 999, 10); !errors.Is(err, ops.ErrNotFound) || !errors.Is(err, ops.ErrBadInput) {
		t.Errorf("show of a missing dead letter: %v, want ErrNotFound", err)
	}
	if _, err := ops.ListDeadLetters(f.ctx, f.fleet, ops.DeadLetterFilter{Tenant: "a b"}); !errors.Is(err, ops.ErrBadInput) {
		t.Errorf("list of a bad tenant: %v, want ErrBadInput", err)
	}

	dry, err := ops.PurgeDeadLetters(f.ctx, f.fleet, ops.DeadLetterPurgeOptions{DeadLetterFilter: ops.DeadLetterFilter{Tenant: "acme"}, DryRun: true})
	if err != nil || fmt.Sprint(dry.Removed) != fmt.Sprint([]uint64{a1, a2}) {
		t.Fatalf("dry purge = %v, %v", dry.Removed, err)
	}
	if got := list(ops.DeadLetterFilter{}); len(got) != 4 {
		t.Fatalf("a dry run removed dead letters: %v left", got)
	}
	rep, err := ops.PurgeDeadLetters(f.ctx, f.fleet, ops.DeadLetterPurgeOptions{DeadLetterFilter: ops.DeadLetterFilter{Tenant: "acme"}})
	if err != nil || len(rep.Removed) != 2 {
		t.Fatalf("purge = %v, %v", rep.Removed, err)
	}
	if got := list(ops.DeadLetterFilter{}); fmt.Sprint(got) != fmt.Sprint([]uint64{g1, bad}) {
		t.Errorf("after purging acme's: %v, want %v", got, []uint64{g1, bad})
	}
}

// TestDeadLettersWithoutStream: no stream stores the dead-letter subjects
// (none was ever made): an empty list, and a replay that does nothing.
func TestDeadLettersWithoutStream(t *testing.T) {
	f := setup(t)
	if err := f.js.DeleteStream(f.ctx, "JOBS_DLQ"); err != nil {
		t.Fatal(err)
	}
	ds, err := ops.ListDeadLetters(f.ctx, f.fleet, ops.DeadLetterFilter{})
	if err != nil || len(ds) != 0 {
		t.Errorf("list = %v, %v; want none", ds, err)
	}
	rep, err := ops.ReplayDeadLetters(f.ctx, f.fleet, ops.ReplayOptions{})
	if err != nil || len(rep.Replayed) != 0 {
		t.Errorf("replay = %+v, %v; want nothing", rep, err)
	}
}

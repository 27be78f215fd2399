package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/header"
	tenantpkg "github.com/throttler/throttler/tenant"
	"github.com/throttler/throttler/throttle"
)

// wantDeadLetter fails the test unless dl is m's dead letter on subject,
// with its data and headers, m's original subject and job id, and the
// Throttler-* headers given in want (a "" value: the header is absent).
func wantDeadLetter(t *testing.T, dl *nats.Msg, m *fakeMsg, subject string, want map[string]string) {
	t.Helper()
	if dl.Subject != subject {
		t.Errorf("dead letter on %q, want %q", dl.Subject, subject)
	}
	if string(dl.Data) != string(m.data) {
		t.Errorf("dead letter data %q, want the job's %q", dl.Data, m.data)
	}
	for k, vs := range m.header {
		if !strings.HasPrefix(k, "Nats-") && !strings.HasPrefix(k, "Throttler-") && !slices.Equal(dl.Header[k], vs) {
			t.Errorf("dead letter header %s = %q, want the job's %q", k, dl.Header[k], vs)
		}
	}
	all := map[string]string{
		header.Subject:        m.subject,
		header.JobID:          m.id(),
		jetstream.MsgIDHeader: "dlq:" + m.id(),
	}
	for k, v := range want {
		all[k] = v
	}
	for k, v := range all {
		if got := dl.Header.Get(k); got != v && !(k == header.Reason && strings.Contains(got, v) && v != "") {
			t.Errorf("dead letter header %s = %q, want %q", k, got, v)
		}
	}
}

// TestMalformedJobIsDeadLetteredThenTerminated: a job without a valid
// tenant or cost, or one the engine refuses as invalid, is published to
// the dead-letter subject with the problem in Throttler-Reason, and only
// then terminated (with the reason when Config.TermWithReason). It never
// runs.
func TestMalformedJobIsDeadLetteredThenTerminated(t *testing.T) {
	tests := []struct {
		name    string
		msg     func() *fakeMsg // a new delivery for each subtest
		refuse  bool            // the engine refuses the job as invalid input
		tenant  string          // the tenant the dead letter is filed under; "" for none
		reason  string          // in Throttler-Reason
		decided bool            // the decider is asked about the job
	}{
		{name: "no tenant", msg: func() *fakeMsg { return newMsg(9, "jobs", "X-Trace", "t9") }, reason: "missing tenant"},
		{name: "malformed tenant", msg: func() *fakeMsg { return newMsg(9, "jobs.a+b", "X-Trace", "t9") }, reason: "malformed tenant"},
		{name: "zero cost", msg: func() *fakeMsg { return newMsg(9, "jobs.acme", "Job-Cost", "0", "X-Trace", "t9") }, tenant: "acme", reason: "malformed cost"},
		{name: "two costs", msg: func() *fakeMsg { return newMsg(9, "jobs.acme", "Job-Cost", "1", "Job-Cost", "2") }, tenant: "acme", reason: "2 Job-Cost headers"},
		{name: "refused by the engine", msg: func() *fakeMsg { return newMsg(9, "jobs.acme", "X-Trace", "t9") }, refuse: true, tenant: "acme",
			reason: "cost exceeds burst", decided: true},
	}
	for _, tt := range tests {
		for _, withReason := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/TermWithReason=%v", tt.name, withReason), func(t *testing.T) {
				e := setup(t)
				e.params.Config.TermWithReason = withReason
				if tt.refuse {
					e.decider.decide = func(context.Context, throttle.Copy) throttle.Result {
						return throttle.Result{Err: &throttle.InvalidError{Code: throttle.CodeCostOverBurst}}
					}
				}
				e.start()
				m := tt.msg()
				e.push(m)
				e.waitSettled(m)
				e.stop()

				dls := e.js.deadLetters()
				if len(dls) != 1 {
					t.Fatalf("%d dead letters, want 1", len(dls))
				}
				filed := tt.tenant
				if filed == "" {
					filed = tenantpkg.Invalid
				}
				wantDeadLetter(t, dls[0], m, "dlq."+filed, map[string]string{header.Reason: tt.reason, header.Tenant: tt.tenant, header.Failures: ""})
				reason := dls[0].Header.Get(header.Reason)
				term := settlement{kind: "term"}
				if withReason {
					term = settlement{kind: "termReason", reason: reason}
				}
				wantSettled(t, m, term)
				if !e.log.before("publish dlq."+filed, m.id()+" "+term.kind) {
					t.Errorf("events %v, want the dead letter published before the job is terminated", e.log)
				}
				if got := e.ran.ids(); len(got) != 0 {
					t.Errorf("handler ran %v, want none", got)
				}
				if n := len(e.decider.asked()); (n > 0) != tt.decided {
					t.Errorf("decider asked about %d jobs, want it asked: %v", n, tt.decided)
				}
				if s := e.stats(filed); s.DeadLettered != 1 {
					t.Errorf("stats of %s %+v, want one dead-lettered", filed, s)
				}
			})
		}
	}
}

// TestFailedJobIsRetriedAfterBackoffThenDeadLettered: a job whose handler
// fails is deferred through the Deferrer, like a throttled job, for the
// retry backoff (RetryInitial × 2^(n-1), ±20%); at MaxFailures failures,
// counted across deliveries, it is dead-lettered with the count and the
// last error, then terminated.
func TestFailedJobIsRetriedAfterBackoffThenDeadLettered(t *testing.T) {
	const maxFailures = 3
	e := setup(t)
	deferrer := &fakeDeferrer{}
	e.params.Deferrer = deferrer
	e.params.Config.MaxFailures = maxFailures
	e.params.Handler = func(_ context.Context, job Job) error {
		return fmt.Errorf("boom on delivery %d", job.Delivered)
	}
	e.start()

	m := newMsg(5, "jobs.acme", "X-Trace", "t5")
	var deliveries []*fakeMsg
	for range maxFailures {
		deliveries = append(deliveries, m)
		e.push(m)
		e.waitSettled(m)
		m = m.redelivered()
	}
	e.stop()

	first := wantNakWithin(t, deliveries[0], 800*time.Millisecond+time.Millisecond, 1200*time.Millisecond+time.Millisecond)
	second := wantNakWithin(t, deliveries[1], 2*800*time.Millisecond+time.Millisecond, 2*1200*time.Millisecond+time.Millisecond)
	ds := deferrer.deferred()
	if len(ds) != 2 || ds[0].Job.ID != "JOBS:5" || ds[0].Wait+time.Millisecond != first || ds[1].Wait+time.Millisecond != second {
		t.Errorf("deferrer got %+v, want the two retries of JOBS:5 with the waits NAK'd (%s, %s less 1 ms)", ds, first, second)
	}
	last := deliveries[maxFailures-1]
	wantSettled(t, last, settlement{kind: "term"})
	dls := e.js.deadLetters()
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dls))
	}
	wantDeadLetter(t, dls[0], last, "dlq.acme", map[string]string{
		header.Reason:   "handler failed 3 times: boom on delivery 3",
		header.Failures: "3",
		header.Tenant:   "acme",
	})
	wantCalls := slices.Repeat([]failedCall{{tenant: "acme", jobID: "JOBS:5", incarnation: 5, giveUpAt: maxFailures}}, maxFailures)
	if got := e.failures.called(); !slices.Equal(got, wantCalls) {
		t.Errorf("failure counter called %+v, want %+v", got, wantCalls)
	}
	if s := e.stats("acme"); s.Failed != 3 || s.DeadLettered != 1 || s.Completed != 0 {
		t.Errorf("stats %+v, want 3 failed, 1 dead-lettered", s)
	}
}

// TestUncountedFailureIsRetriedNotDeadLettered: when a failure cannot be
// counted, the job is taken to have failed once: it is NAK'd for the first
// retry backoff however often it failed before, never dead-lettered early,
// and not through the Deferrer (the owner record may still name this
// incarnation, and a moved copy would be taken for a duplicate).
func TestUncountedFailureIsRetriedNotDeadLettered(t *testing.T) {
	e := setup(t)
	deferrer := &fakeDeferrer{}
	e.params.Deferrer = deferrer
	e.params.Config.MaxFailures = 2
	e.failures.err = &throttle.RedisError{Op: "failed", Err: errors.New("connection refused")}
	e.params.Handler = func(context.Context, Job) error { return errBoom }
	e.start()
	m := newMsg(5, "jobs.acme")
	var deliveries []*fakeMsg
	for range 3 {
		deliveries = append(deliveries, m)
		e.push(m)
		e.waitSettled(m)
		m = m.redelivered()
	}
	e.stop()

	for _, d := range deliveries {
		wantNakWithin(t, d, 800*time.Millisecond, 1200*time.Millisecond)
	}
	if n := len(e.js.deadLetters()); n != 0 {
		t.Errorf("%d dead letters, want none", n)
	}
	if ds := deferrer.deferred(); len(ds) != 0 {
		t.Errorf("deferrer got %+v, want nothing", ds)
	}
	if n := len(e.failures.called()); n != 3 {
		t.Errorf("failure counter called %d times, want 3", n)
	}
}

// TestDeadLetterPublishFailureHandsJobBack: when the dead letter cannot be
// stored, the job is NAK'd with the backoff of its deliveries (RetryInitial
// ±20% on its first), never terminated: nothing is lost.
func TestDeadLetterPublishFailureHandsJobBack(t *testing.T) {
	tests := []struct {
		name    string
		msg     *fakeMsg
		handler Handler
	}{
		{name: "malformed", msg: newMsg(9, "jobs")},
		{name: "failed too often", msg: newMsg(9, "jobs.acme"),
			handler: func(context.Context, Job) error { return errBoom }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := setup(t)
			e.js.publishErr = errors.New("nats: no responders available for request")
			e.params.Config.MaxFailures = 1
			e.params.Config.RetryInitial = 3 * time.Second
			if tt.handler != nil {
				e.params.Handler = tt.handler
			}
			e.start()
			e.push(tt.msg)
			e.waitSettled(tt.msg)
			e.stop()

			wantNakWithin(t, tt.msg, 2400*time.Millisecond, 3600*time.Millisecond)
			if n := len(e.js.deadLetters()); n != 1 {
				t.Errorf("%d dead-letter publishes tried, want 1", n)
			}
			for tenant, s := range e.w.Stats() {
				if s.DeadLettered != 0 {
					t.Errorf("stats of %s %+v, want none dead-lettered", tenant, s)
				}
			}
		})
	}
}

// TestHandlerPanicIsAFailureOfThatJob: a panicking handler fails its own
// job, with the panic in the error; the worker lives on and runs the other
// jobs, and later ones.
func TestHandlerPanicIsAFailureOfThatJob(t *testing.T) {
	e := setup(t)
	e.params.Config.MaxFailures = 1
	e.params.Handler = func(_ context.Context, job Job) error {
		if job.ID == "JOBS:1" {
			panic("kaboom")
		}
		e.ran.add(job)
		return nil
	}
	e.start()
	panicking, other := newMsg(1, "jobs.acme"), newMsg(2, "jobs.acme")
	e.push(panicking, other)
	e.waitSettled(panicking, other)
	later := newMsg(3, "jobs.acme")
	e.push(later)
	e.waitSettled(later)
	if !e.running() {
		t.Fatal("Run returned after a handler panicked")
	}
	e.stop()

	wantSettled(t, panicking, settlement{kind: "term"})
	wantSettled(t, other, ack)
	wantSettled(t, later, ack)
	dls := e.js.deadLetters()
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dls))
	}
	wantDeadLetter(t, dls[0], panicking, "dlq.acme", map[string]string{
		header.Reason: "handler panicked: kaboom", header.Failures: "1", header.Tenant: "acme"})
	if got := e.failures.called(); len(got) != 1 || got[0].jobID != "JOBS:1" {
		t.Errorf("failure counter called %+v, want once, for JOBS:1", got)
	}
	if s := e.stats("acme"); s.Failed != 1 || s.Completed != 2 {
		t.Errorf("stats %+v, want 1 failed, 2 completed", s)
	}
}

func TestOneLine(t *testing.T) {
	if got := oneLine("a\r\nb\nc"); got != "a  b c" {
		t.Errorf("oneLine = %q", got)
	}
}

package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/internal/testenv"
)

// TestScheduleMovesJobsOffTheConsumer: with THROTTLER_DEFER=schedule every
// limited job leaves the consumer (its ack-pending slot is free) and comes
// back at its slot as a copy that keeps its identity, is admitted without a
// second charge and is forwarded once.
func TestScheduleMovesJobsOffTheConsumer(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{
		"THROTTLER_TENANT_LIMITS": "slow=2/s:1",
		"THROTTLER_DEFER":         "schedule",
		// One handler at a time, so the order handlers run in is the
		// order of admission.
		"THROTTLER_CONCURRENCY": "1",
	})
	var mu sync.Mutex
	admitted := map[string]time.Time{}
	handler := func(ctx context.Context, job consumer.Job) error {
		mu.Lock()
		defer mu.Unlock()
		if _, dup := admitted[job.ID]; dup {
			t.Errorf("job %s ran twice", job.ID)
		}
		admitted[job.ID] = time.Now()
		return consumer.Forwarder(e.js, cfg.Forward)(ctx, job)
	}
	w := e.startWorker(cfg, handler)
	out := e.collect("done.*")
	e.waitStream(cfg.Stream)

	const n = 6
	ids := make([]string, n)
	start := time.Now()
	for i := range ids {
		ids[i] = jobID(cfg.Stream, e.publish("jobs.slow", nil, []byte("x")))
	}
	// While jobs wait, they are not pending on the consumer.
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("%d jobs moved", n-1), func() bool { return w.stats()["slow"].Moved >= n-1 })
	info := e.consumerInfo(cfg.Stream, cfg.Consumer)
	if info.NumAckPending > 1 {
		t.Errorf("%d jobs ack-pending while moved jobs wait, want ≤ 1", info.NumAckPending)
	}

	got := out.waitCount(t, n, 20*time.Second)
	seen := map[string]bool{}
	for _, m := range got {
		if seen[m.jobID] {
			t.Errorf("job %s forwarded twice", m.jobID)
		}
		seen[m.jobID] = true
	}
	for _, id := range ids {
		if !seen[id] {
			t.Errorf("job %s was not forwarded under its original id", id)
		}
	}
	st := w.stats()["slow"]
	if st.Moved != n-1 {
		t.Errorf("moved %d jobs, want %d", st.Moved, n-1)
	}
	// FIFO and never early: job i runs no sooner than its slot, i/2 s after
	// the burst of 1.
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < n; i++ {
		if !admitted[ids[i]].After(admitted[ids[i-1]]) {
			t.Errorf("job %d admitted before job %d", i, i-1)
		}
		if early := time.Duration(i) * 500 * time.Millisecond; admitted[ids[i]].Sub(start) < early-50*time.Millisecond {
			t.Errorf("job %d admitted %s after the burst, before its slot at %s", i, admitted[ids[i]].Sub(start), early)
		}
	}
}

// TestFallsBackToNakWithoutSchedules: on a nats-server without message
// schedules (the distribution's 2.9.10), THROTTLER_DEFER=auto notices at
// start and defers with NAK only; jobs are still throttled and forwarded
// once each. THROTTLER_DEFER=schedule refuses to start there.
func TestFallsBackToNakWithoutSchedules(t *testing.T) {
	e := setupLegacy(t)
	cfg := e.config(map[string]string{
		"THROTTLER_TENANT_LIMITS": "slow=4/s:1",
		"THROTTLER_DEFER":         "auto",
		// Force moves if they were possible: every wait would qualify.
		"THROTTLER_SCHEDULE_AFTER": "1s",
	})
	w := e.startWorker(cfg, nil)
	out := e.collect("done.*")
	e.waitStream(cfg.Stream)

	ids := map[string]bool{}
	for i := 0; i < 8; i++ {
		ids[jobID(cfg.Stream, e.publish("jobs.slow", nil, []byte("x")))] = true
	}
	got := out.waitCount(t, len(ids), 20*time.Second)
	for _, m := range got {
		if !ids[m.jobID] {
			t.Errorf("job %s forwarded twice or never published", m.jobID)
		}
		delete(ids, m.jobID)
	}
	st := w.stats()["slow"]
	if st.Deferred == 0 || st.Moved != 0 {
		t.Errorf("deferred %d, moved %d: want NAK deferrals only", st.Deferred, st.Moved)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := e.js.Stream(ctx, cfg.Stream)
	must(t, err, "stream")
	if c := s.CachedInfo().Config; c.AllowMsgSchedules || len(c.Subjects) != 1 {
		t.Errorf("stream config %v / schedules %v: want only the job subjects", c.Subjects, c.AllowMsgSchedules)
	}

	// schedule mode cannot work here: the worker says so and stops.
	sched := e.config(map[string]string{"THROTTLER_DEFER": "schedule", "THROTTLER_CONSUMER": "other"})
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	err = app.Run(rctx, sched, app.Options{NATS: e.nc, Redis: e.redis.Client(t), Logger: slog.New(slog.NewTextHandler(logSink(), nil))})
	if !errors.Is(err, app.ErrUnsupported) || !strings.Contains(err.Error(), "2.12") {
		t.Errorf("schedule mode on nats-server 2.9: got %v, want ErrUnsupported naming 2.12", err)
	}
}

// TestMovedJobWhoseHandlerFailedStillRuns: a job admitted at its slot whose
// handler fails comes back, is deferred again and moved again. Its new copy
// is the job's successor, not a duplicate of the incarnation that failed:
// every job runs to success exactly once, none is acked unrun, and none is
// dead-lettered for one failure.
func TestMovedJobWhoseHandlerFailedStillRuns(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{
		"THROTTLER_TENANT_LIMITS": "slow=4/s:1",
		"THROTTLER_DEFER":         "schedule",
		"THROTTLER_MAX_FAILURES":  "3",
	})
	log := newCallLog()
	forward := consumer.Forwarder(e.js, cfg.Forward)
	w := e.startWorker(cfg, log.wrap(func(ctx context.Context, job consumer.Job) error {
		if len(log.calls(job.ID)) == 1 { // its first call, recorded by wrap
			return errors.New("downstream busy")
		}
		return forward(ctx, job)
	}))
	out := e.collect("done.*")
	dlq := e.collect("dlq.*")
	e.waitStream(cfg.Stream)

	// Enough jobs that a failed job's retry finds the later slots taken,
	// so it is deferred and moved again.
	want := e.publishJobs(cfg.Stream, "jobs.slow", nil, 10)
	checkExactlyOnce(t, "forwarded", out.waitCount(t, len(want), 30*time.Second), want)
	e.waitSettled(t, cfg, 10*time.Second)
	for id := range want {
		if n := len(log.calls(id)); n != 2 {
			t.Errorf("%s: handler called %d times, want 2 (one failure, one success)", id, n)
		}
	}
	if letters := dlq.waitAll(t, 10*time.Second); len(letters) != 0 {
		t.Errorf("%d jobs dead-lettered, want none: %+v", len(letters), letters)
	}
	st := w.stats()["slow"]
	if st.Duplicates != 0 || st.Moved == 0 || st.Failed != int64(len(want)) {
		t.Errorf("stats %+v: want no duplicates, some moves and %d failures", st, len(want))
	}
}

// TestTwoCopiesOfOneMoveRunOnce: a move redone after the stream's dedup
// window (a worker died between storing a bundle and acking its jobs, and
// nothing ran for minutes) can leave two copies of one move, with the same
// move count. They are different messages, and only one of them may run.
func TestTwoCopiesOfOneMoveRunOnce(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "1000/s"})
	var mu sync.Mutex
	runs := map[string]int{}
	forward := consumer.Forwarder(e.js, cfg.Forward)
	w := e.startWorker(cfg, func(ctx context.Context, job consumer.Job) error {
		mu.Lock()
		runs[job.ID]++
		mu.Unlock()
		return forward(ctx, job)
	})
	out := e.collect("done.*")
	e.waitStream(cfg.Stream)

	copyOf := nats.Header{}
	copyOf.Set(header.JobID, "JOBS:1000")
	copyOf.Set(header.Subject, "jobs.acme")
	copyOf.Set(header.Deferrals, "1")
	e.publish("jobs.acme", copyOf, []byte("first copy"))
	e.publish("jobs.acme", copyOf, []byte("second copy"))

	out.waitCount(t, 1, 10*time.Second)
	e.waitSettled(t, cfg, 10*time.Second)
	forwarded := len(out.waitAll(t, 10*time.Second))
	mu.Lock()
	defer mu.Unlock()
	if runs["JOBS:1000"] != 1 || forwarded != 1 {
		t.Errorf("job ran %d times, forwarded %d times: want once", runs["JOBS:1000"], forwarded)
	}
	if st := w.stats()["acme"]; st.Duplicates != 1 {
		t.Errorf("duplicates %d, want 1", st.Duplicates)
	}
}

// TestNakWorkerUnpacksBundlesLeftByAnEarlierRun: jobs moved by a worker that
// deferred with schedules still run after the workers are switched to
// THROTTLER_DEFER=nak. Their bundles fire later; a nak worker must unpack
// them too, or the jobs they carry would wait in the stream until a worker
// that moves jobs came back.
func TestNakWorkerUnpacksBundlesLeftByAnEarlierRun(t *testing.T) {
	countsOnly(t)
	e := setup(t)
	vars := map[string]string{"THROTTLER_TENANT_LIMITS": "slow=20/m:1", "THROTTLER_DEFER": "schedule"}
	first := e.config(vars)
	e.ensureStream(first)
	// Published before the first worker starts, so it pulls them together:
	// one admitted, the rest moved as one bundle firing a lead
	// (consumer.ScheduleLead) before the first slot, 3 s from now. Five,
	// so that the first pull taking only one or two still leaves a bundle.
	const n = 5
	ids := make([]string, n)
	for i := range ids {
		ids[i] = jobID(first.Stream, e.publish("jobs.slow", nil, []byte("x")))
	}
	w := e.startWorker(first, consumer.Forwarder(e.js, first.Forward))
	out := e.collect("done.*")
	testenv.Eventually(t, 5*time.Second, fmt.Sprintf("%d jobs moved", n-1), func() bool { return w.stats()["slow"].Moved >= n-1 })
	w.stop(t)
	bundles := e.subjectCount(first.Stream, first.ScheduleSubject+".b.>")
	if bundles == 0 {
		t.Fatalf("no bundle waits in the stream after the first worker stopped: the test needs one")
	}

	vars["THROTTLER_DEFER"] = "nak"
	second := e.config(vars)
	e.startWorker(second, consumer.Forwarder(e.js, second.Forward))
	got := out.waitCount(t, n, 30*time.Second) // the last slot 12 s on
	seen := map[string]int{}
	for _, m := range got {
		seen[m.jobID]++
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("job %s forwarded %d times, want once", id, seen[id])
		}
	}
}

// TestUnreadableBundleIsDeadLettered: a message on a bundle's unpack subject
// that is not a bundle this version reads (garbage, or the layout of a
// later version) is not retried forever: it goes to the dead-letter subject
// of the tenant its subject names, with the reason, and leaves the jobs
// stream.
func TestUnreadableBundleIsDeadLettered(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFER": "schedule"})
	w := e.startWorker(cfg, consumer.Forwarder(e.js, cfg.Forward))
	// The worker has bound the schedule subjects once it is built.
	e.waitBuilt(w)
	dlq := e.collect("dlq.*")
	bogus := cfg.ScheduleSubject + ".u.acme.JOBS-1-ffff"
	e.publish(bogus, nil, []byte{0xff, 1, 2, 3})
	got := dlq.waitCount(t, 1, 10*time.Second)
	if got[0].subject != "dlq.acme" || !strings.Contains(got[0].reason, "unreadable bundle") {
		t.Errorf("dead letter on %s with reason %q, want dlq.acme and an unreadable bundle", got[0].subject, got[0].reason)
	}
	testenv.Eventually(t, 5*time.Second, "the unreadable bundle to leave the jobs stream", func() bool {
		return e.subjectCount(cfg.Stream, bogus) == 0
	})
	// Settled, the bundles consumer holds nothing to retry: a bundle handed
	// back would be awaiting its redelivery.
	e.waitSettled(t, cfg, 10*time.Second)
	if n := w.stats()["acme"].DeadLettered; n != 1 {
		t.Errorf("the worker dead-lettered %d times, want once", n)
	}
	if n := len(dlq.waitAll(t, 10*time.Second)); n != 1 {
		t.Errorf("%d dead letters, want 1", n)
	}
	if info := e.consumerInfo(cfg.Stream, cfg.Consumer+"_bundles"); info.NumRedelivered != 0 || info.Delivered.Consumer != 1 {
		t.Errorf("bundles consumer: %d delivered, %d redelivered; want the bundle delivered once", info.Delivered.Consumer, info.NumRedelivered)
	}
}

// TestStreamRetentionAndMoves: a jobs stream with interest retention drops
// at once a message no consumer wants, so a moved job's copy would be lost
// there. On such a stream THROTTLER_DEFER=auto defers with NAK only (and
// loses nothing), and THROTTLER_DEFER=schedule refuses to start. A stream
// with work-queue retention keeps the copies: jobs are moved there as on
// one with limits retention.
func TestStreamRetentionAndMoves(t *testing.T) {
	for _, tc := range []struct {
		retention jetstream.RetentionPolicy
		moves     bool
	}{
		{jetstream.InterestPolicy, false},
		{jetstream.WorkQueuePolicy, true},
	} {
		t.Run(tc.retention.String(), func(t *testing.T) {
			e := setup(t)
			// MaxAckPending 40: a tenant's fair share of NAK'd jobs is one,
			// so a worker that may move jobs moves the rest.
			vars := map[string]string{"THROTTLER_TENANT_LIMITS": "slow=5/s:1", "THROTTLER_DEFER": "auto", "THROTTLER_MAX_ACK_PENDING": "40"}
			cfg := e.config(vars)
			e.createJobsStream(jetstream.StreamConfig{Name: cfg.Stream, Subjects: cfg.Subjects, Retention: tc.retention})
			w := e.startWorker(cfg, consumer.Forwarder(e.js, cfg.Forward))
			out := e.collect("done.*")
			// An interest stream drops what no consumer wants yet: publish
			// once the worker's consumer exists.
			testenv.Eventually(t, 10*time.Second, "the worker's consumer", func() bool {
				_, err := e.js.Consumer(context.Background(), cfg.Stream, cfg.Consumer)
				return err == nil
			})
			const n = 6
			want := e.publishJobs(cfg.Stream, "jobs.slow", nil, n)
			checkExactlyOnce(t, "forwarded", out.waitCount(t, n, 15*time.Second), want)
			if moved := w.stats()["slow"].Moved; (moved > 0) != tc.moves {
				t.Errorf("moved %d jobs; want moves: %v", moved, tc.moves)
			}
			if tc.retention != jetstream.InterestPolicy {
				return
			}
			w.stop(t)
			vars["THROTTLER_DEFER"] = "schedule"
			refused := e.startWorker(e.config(vars), consumer.Forwarder(e.js, cfg.Forward))
			select {
			case <-refused.done:
				if !errors.Is(refused.err, app.ErrUnsupported) || !strings.Contains(refused.err.Error(), "THROTTLER_DEFER") {
					t.Errorf("schedule on an interest stream: %v, want ErrUnsupported naming THROTTLER_DEFER", refused.err)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("THROTTLER_DEFER=schedule started on a stream with interest retention")
			}
		})
	}
}

// TestBundlesInAStreamThatDeniesDeletes: on a jobs stream with DenyDelete,
// an unpacked bundle cannot be deleted; it is acked all the same (its
// copies are stored) rather than handed back to be unpacked again and
// again, and every job runs once.
func TestBundlesInAStreamThatDeniesDeletes(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_TENANT_LIMITS": "slow=5/s:1", "THROTTLER_DEFER": "schedule"})
	e.createJobsStream(jetstream.StreamConfig{Name: cfg.Stream, Subjects: cfg.Subjects, DenyDelete: true})
	// Published before the worker starts, so it pulls them together and
	// moves the deferred ones as one bundle.
	const n = 6
	want := e.publishJobs(cfg.Stream, "jobs.slow", nil, n)
	w := e.startWorker(cfg, consumer.Forwarder(e.js, cfg.Forward))
	out := e.collect("done.*")
	checkExactlyOnce(t, "forwarded", out.waitCount(t, n, 15*time.Second), want)
	if moved := w.stats()["slow"].Moved; moved != n-1 {
		t.Errorf("moved %d jobs, want %d", moved, n-1)
	}
	// The unpacked bundles stay in the stream (they cannot be deleted), so
	// the jobs cannot settle as waitSettled sees it; the consumers can.
	// Idle, the bundles consumer holds nothing to retry: a bundle handed
	// back would be awaiting its redelivery.
	e.waitIdle(t, 10*time.Second, cfg.Stream, cfg.Consumer, cfg.Consumer+"_bundles")
	info := e.consumerInfo(cfg.Stream, cfg.Consumer+"_bundles")
	if info.NumRedelivered != 0 || info.NumAckPending != 0 || info.Delivered.Consumer == 0 {
		t.Errorf("bundles consumer: %d delivered, %d redelivered, %d ack-pending; want some delivered, none redelivered or pending",
			info.Delivered.Consumer, info.NumRedelivered, info.NumAckPending)
	}
}

// TestMovesWithTenantFromHeader: with the tenant in a header
// (THROTTLER_TENANT_FROM=header:…), a moved job's copy keeps the header, so
// it comes back as the same tenant's job, and bundles are named after it.
func TestMovesWithTenantFromHeader(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{
		"THROTTLER_TENANT_FROM":   "header:Tenant-Id",
		"THROTTLER_TENANT_LIMITS": "slow=5/s:1",
		"THROTTLER_DEFER":         "schedule",
	})
	e.ensureStream(cfg)
	const n = 6
	want := e.publishJobs(cfg.Stream, "jobs.any", nats.Header{"Tenant-Id": {"slow"}}, n)
	w := e.startWorker(cfg, consumer.Forwarder(e.js, cfg.Forward))
	out := e.collect("done.*")
	got := out.waitCount(t, n, 15*time.Second)
	checkExactlyOnce(t, "forwarded", got, want)
	for _, m := range got {
		if m.subject != "done.slow" {
			t.Errorf("job %s forwarded to %s, want done.slow", m.jobID, m.subject)
		}
	}
	if moved := w.stats()["slow"].Moved; moved != n-1 {
		t.Errorf("moved %d jobs, want %d", moved, n-1)
	}
}

// TestSubjectsOverlappingAnotherStream: when another stream already binds
// the schedule subjects (another fleet's, left at the default prefix) or
// the job subjects, start-up stops at once naming the variables (a setting
// to change, exit status 2) in every mode that moves jobs, instead of
// retrying for ever or quietly deferring with NAK only, which would give
// up fairness. A fleet that only NAKs needs no schedule subjects and runs.
func TestSubjectsOverlappingAnotherStream(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: "OTHER", Subjects: []string{"sched.>", "orders.>"}})
	must(t, err, "create the other stream")
	e.expectStop(map[string]string{"THROTTLER_DEFER": "schedule"}, "THROTTLER_SCHEDULE_SUBJECT")
	e.expectStop(map[string]string{"THROTTLER_DEFER": "auto"}, "THROTTLER_SCHEDULE_SUBJECT")
	e.expectStop(map[string]string{"THROTTLER_DEFER": "auto", "THROTTLER_SUBJECTS": "orders.>", "THROTTLER_STREAM": "ORD"}, "THROTTLER_SUBJECTS")

	cfg := e.config(map[string]string{"THROTTLER_DEFER": "nak", "THROTTLER_TENANT_LIMITS": "slow=5/s:1"})
	e.startWorker(cfg, consumer.Forwarder(e.js, cfg.Forward))
	out := e.collect("done.*")
	e.waitStream(cfg.Stream)
	want := e.publishJobs(cfg.Stream, "jobs.slow", nil, 4)
	checkExactlyOnce(t, "forwarded", out.waitCount(t, len(want), 15*time.Second), want)
}

// TestStreamMaxAgeDoesNotExpireDeferredJobs: on a jobs stream whose MaxAge
// is shorter than the jobs' waits, a deferred job is never left in the
// stream long enough to expire unrun. A moved copy comes back within half
// the max age (and is deferred again, keeping its slot), and a job whose
// message would pass half its max age while NAK'd is moved instead, its
// copy being a new message. With limit 1/s and 10 jobs published at once,
// the last waits 9 s against a max age of 4 s.
func TestStreamMaxAgeDoesNotExpireDeferredJobs(t *testing.T) {
	for _, tc := range []struct {
		name, scheduleAfter string
	}{
		{"long waits moved", "1s"},  // the copies' waits are capped
		{"short waits NAK'd", "1m"}, // every wait is short: moved only for age
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			cfg := e.config(map[string]string{"THROTTLER_TENANT_LIMITS": "slow=1/s:1", "THROTTLER_DEFER": "auto",
				"THROTTLER_SCHEDULE_AFTER": tc.scheduleAfter})
			e.createJobsStream(jetstream.StreamConfig{Name: cfg.Stream, Subjects: cfg.Subjects, MaxAge: 4 * time.Second})
			w := e.startWorker(cfg, consumer.Forwarder(e.js, cfg.Forward))
			out := e.collect("done.*")
			const n = 10
			want := e.publishJobs(cfg.Stream, "jobs.slow", nil, n)
			checkExactlyOnce(t, "forwarded", out.waitCount(t, n, 25*time.Second), want)
			if w.stats()["slow"].Moved == 0 {
				t.Errorf("no job was moved")
			}
		})
	}
}

// TestConsumerWithSettingsThatCannotChange: a durable consumer of the
// worker's name that exists with settings JetStream cannot update (here
// another deliver and ack policy) stops start-up naming
// THROTTLER_CONSUMER, rather than leaving the worker retrying for ever;
// another name starts and runs the jobs.
func TestConsumerWithSettingsThatCannotChange(t *testing.T) {
	e := setup(t)
	cfg := e.config(nil)
	e.ensureStream(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := e.js.CreateConsumer(ctx, cfg.Stream, jetstream.ConsumerConfig{Durable: cfg.Consumer,
		AckPolicy: jetstream.AckAllPolicy, DeliverPolicy: jetstream.DeliverNewPolicy})
	must(t, err, "create consumer")
	e.expectStop(nil, "THROTTLER_CONSUMER")

	cfg = e.config(map[string]string{"THROTTLER_CONSUMER": "other"})
	e.startWorker(cfg, consumer.Forwarder(e.js, cfg.Forward))
	out := e.collect("done.*")
	want := e.publishJobs(cfg.Stream, "jobs.acme", nil, 3)
	checkExactlyOnce(t, "forwarded", out.waitCount(t, len(want), 15*time.Second), want)
}

// TestExistingStreamBindsTheJobSubjects: a jobs stream that already exists
// without THROTTLER_SUBJECTS (created for something else, say) gets them
// added, as the schedule subjects are, so jobs published there are stored
// and run instead of being refused; subjects the stream already covers
// with a wildcard are left as they are.
func TestExistingStreamBindsTheJobSubjects(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFER": "nak"})
	e.createJobsStream(jetstream.StreamConfig{Name: cfg.Stream, Subjects: []string{"orders.>"}})
	e.startWorker(cfg, consumer.Forwarder(e.js, cfg.Forward))
	out := e.collect("done.*")
	subjects := func(name string) []string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := e.js.Stream(ctx, name)
		must(t, err, "stream %s", name)
		return s.CachedInfo().Config.Subjects
	}
	testenv.Eventually(t, 10*time.Second, "the job subjects bound", func() bool { return slices.Contains(subjects(cfg.Stream), "jobs.>") })
	if got := subjects(cfg.Stream); !slices.Contains(got, "orders.>") {
		t.Errorf("stream subjects %v: the stream's own subject was dropped", got)
	}
	want := e.publishJobs(cfg.Stream, "jobs.acme", nil, 3)
	checkExactlyOnce(t, "forwarded", out.waitCount(t, len(want), 10*time.Second), want)

	// A stream whose wildcard covers the job subjects is left alone.
	narrow := e.config(map[string]string{"THROTTLER_DEFER": "nak", "THROTTLER_STREAM": "WIDE", "THROTTLER_SUBJECTS": "wide.*.email",
		"THROTTLER_CONSUMER": "wide"})
	e.createJobsStream(jetstream.StreamConfig{Name: "WIDE", Subjects: []string{"wide.>"}})
	wide := e.startWorker(narrow, consumer.Forwarder(e.js, narrow.Forward))
	e.waitBuilt(wide) // its set-up is done: it changed the stream or never will
	if got := subjects("WIDE"); !slices.Equal(got, []string{"wide.>"}) {
		t.Errorf("stream WIDE's subjects became %v, want [wide.>]", got)
	}
}

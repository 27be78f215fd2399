package integration

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/streams"
	"github.com/throttler/throttler/subject"
	"github.com/throttler/throttler/throttle"
)

// lostAck is a message whose Ack never reaches the server: the worker
// "crashed" after storing the job's copy and before acking the original.
type lostAck struct{ jetstream.Msg }

func (lostAck) Ack() error { return nil }

// crashOnce moves jobs like ScheduleDeferrer but loses the original's ack the
// first time.
type crashOnce struct {
	inner   consumer.ScheduleDeferrer
	crashed atomic.Bool
}

func (c *crashOnce) Defer(ctx context.Context, ds []consumer.Deferral) {
	if c.crashed.CompareAndSwap(false, true) {
		ds[0].Msg = lostAck{ds[0].Msg}
	}
	c.inner.Defer(ctx, ds)
}

// The jobs stream of the crash tests, its schedule prefix and its consumer.
const crashStream, crashSched = "JOBS", "sched"

// scheduleStream creates the crash tests' jobs stream, with schedules on
// crashSched.>, and a consumer "w" of jobs.> with the given AckWait.
func (e *env) scheduleStream(ctx context.Context, ackWait time.Duration) (jetstream.Stream, jetstream.Consumer) {
	e.t.Helper()
	s, err := streams.EnsureStream(ctx, e.js, streams.StreamSpec{Name: crashStream, Subjects: []string{"jobs.>"}, ScheduleSubjects: []string{crashSched + ".>"}})
	must(e.t, err, "stream")
	cons, err := streams.EnsureConsumer(ctx, e.js, streams.ConsumerSpec{Stream: crashStream, Name: "w", FilterSubjects: []string{"jobs.>"}, MaxAckPending: 100, AckWait: ackWait})
	must(e.t, err, "consumer")
	return s, cons
}

// TestCrashBetweenMoveAndAck: a worker stores a moved job's copy and dies
// before acking the original, so JetStream redelivers the original after
// AckWait. Either way round, the job runs exactly once and nothing is lost:
//   - the copy ran first: the throttle recognises the original as a
//     duplicate and it is acked without running;
//   - the original comes back before its slot: it is moved again, the
//     second copy is deduplicated by its Nats-Msg-Id, and the one copy runs.
func TestCrashBetweenMoveAndAck(t *testing.T) {
	countsOnly(t)
	for _, tc := range []struct {
		name           string
		ackWait        time.Duration
		limit          throttle.Limit
		wantDuplicates int64
	}{
		{"copy runs first", 3 * time.Second, throttle.PerSecond(1, 1), 1},
		{"original returns first", time.Second, throttle.Limit{Rate: 1, Period: 3 * time.Second, Burst: 1}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) { crashBetweenMoveAndAck(t, tc.ackWait, tc.limit, tc.wantDuplicates) })
	}
}

func crashBetweenMoveAndAck(t *testing.T, ackWait time.Duration, limit throttle.Limit, wantDuplicates int64) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const stream, sched = crashStream, crashSched
	_, cons := e.scheduleStream(ctx, ackWait)
	rdb := e.redis.Client(t)
	lim, err := throttle.New(rdb, throttle.Options{Policies: throttle.Rules{Default: throttle.Enforce(limit)}, Horizon: time.Minute})
	must(t, err, "limiter")
	decider, err := throttle.NewDecider(lim, nil)
	must(t, err, "decider")
	failures, err := throttle.NewFailures(lim, time.Hour)
	must(t, err, "failures")

	var mu sync.Mutex
	runs := map[string]int{}
	handler := func(_ context.Context, job consumer.Job) error {
		mu.Lock()
		runs[job.ID]++
		mu.Unlock()
		return nil
	}
	deferrer := &crashOnce{inner: consumer.ScheduleDeferrer{JetStream: e.js, Subjects: sched}}
	w, err := consumer.New(consumer.Params{JetStream: e.js, Consumer: cons, Decider: decider, Failures: failures, Handler: handler,
		Deferrer: deferrer, Config: consumer.Config{Concurrency: 4}})
	must(t, err, "worker")
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	}()

	first := jobID(stream, e.publish("jobs.acme", nil, []byte("1")))
	second := jobID(stream, e.publish("jobs.acme", nil, []byte("2")))

	// Both jobs ran and nothing more can: the original whose ack was lost
	// came back and was acked, and no copy waits to fire.
	testenv.Eventually(t, 20*time.Second, "both jobs run and the jobs settled", func() bool {
		mu.Lock()
		n := len(runs)
		mu.Unlock()
		return n == 2 && e.settled(stream, subject.Schedules(sched), "w") == ""
	})
	mu.Lock()
	defer mu.Unlock()
	if runs[first] != 1 || runs[second] != 1 || len(runs) != 2 {
		t.Errorf("runs %v: want each of %s and %s exactly once", runs, first, second)
	}
	if !deferrer.crashed.Load() {
		t.Errorf("the crash was never simulated")
	}
	st := w.Stats()["acme"]
	if st.Moved < 1 || st.Duplicates != wantDuplicates {
		t.Errorf("moved %d, duplicates %d: want the second job moved and %d duplicates", st.Moved, st.Duplicates, wantDuplicates)
	}
}

// TestRegroupedBundleIsStored: a worker stores a bundle of moved jobs and
// dies before acking them; redelivered, they may be grouped with other jobs
// behind the same first job. That second bundle must be stored too, not
// taken for the first one by JetStream's deduplication (which would ack
// the new jobs as moved while no copy of them is kept).
func TestRegroupedBundleIsStored(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const stream, sched = crashStream, crashSched
	s, cons := e.scheduleStream(ctx, time.Minute)
	for range 4 {
		e.publish("jobs.acme", nil, []byte("x"))
	}
	batch, err := cons.Fetch(4, jetstream.FetchMaxWait(5*time.Second))
	must(t, err, "fetch")
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	if len(msgs) != 4 {
		t.Fatalf("fetched %d jobs, want 4", len(msgs))
	}
	deferral := func(m jetstream.Msg) consumer.Deferral {
		meta, err := m.Metadata()
		must(t, err, "metadata")
		return consumer.Deferral{Msg: m, Wait: time.Minute,
			Job: consumer.Job{ID: jobID(stream, meta.Sequence.Stream), Tenant: "acme", Subject: m.Subject(), Published: meta.Timestamp}}
	}
	d := consumer.ScheduleDeferrer{JetStream: e.js, Bundle: 64, Subjects: sched}

	// The first worker bundles jobs 1-3 and dies before its acks arrive.
	first := []consumer.Deferral{deferral(lostAck{msgs[0]}), deferral(lostAck{msgs[1]}), deferral(lostAck{msgs[2]})}
	d.Defer(ctx, first)
	// Job 1 comes back grouped with job 4 this time.
	second := []consumer.Deferral{deferral(msgs[0]), deferral(msgs[3])}
	d.Defer(ctx, second)
	for _, df := range append(first, second...) {
		if df.Err != nil || !df.Moved {
			t.Fatalf("job %s: moved %v, err %v", df.Job.ID, df.Moved, df.Err)
		}
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(sched+".b.>"))
	must(t, err, "stream info")
	if n := len(info.State.Subjects); n != 2 {
		t.Fatalf("%d bundles stored (%v), want 2: the second carries job 4, acked as moved", n, info.State.Subjects)
	}
}

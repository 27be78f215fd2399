package integration

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

// fastClaim is the incarnation the fast lane claims a job stored at seq
// for: 2^52 + seq (consumer.fastIncarnation).
func fastClaim(seq uint64) int64 { return 1<<52 + int64(seq) }

// waitLaneOn waits until worker w has read jobs of tenant a's backlog, so
// its lane knows the backlog, and its lane reads arrivals.
func (e *env) waitLaneOn(w *worker, cfg *app.Settings) {
	e.t.Helper()
	testenv.Eventually(e.t, 10*time.Second, "the worker reading the backlog", func() bool { return w.stats()["a"].Delivered > 0 })
	testenv.Eventually(e.t, 10*time.Second, "the lane reading arrivals", func() bool {
		_, err := e.js.Consumer(context.Background(), cfg.Stream, cfg.Consumer+"_arrivals")
		return err == nil
	})
}

// ran records the jobs a handler ran.
type ran struct {
	mu    sync.Mutex
	jobs  map[string][]consumer.Job
	first map[string]time.Time // when each job first ran
}

func (r *ran) add(job consumer.Job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.jobs == nil {
		r.jobs, r.first = map[string][]consumer.Job{}, map[string]time.Time{}
	}
	if len(r.jobs[job.ID]) == 0 {
		r.first[job.ID] = time.Now()
	}
	r.jobs[job.ID] = append(r.jobs[job.ID], job)
}

func (r *ran) firstRun(id string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.first[id]
}

func (r *ran) get(id string) []consumer.Job {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.jobs[id]
}

// TestFastLanePassesABacklog: jobs of a tenant with nothing queued, stored
// behind another tenant's backlog of 10,000 jobs, run before the jobs
// consumer reaches them: the fast lane copies each out (the original is
// deleted), and each runs once, as its copy, under its original id. The
// tenant comes from the subject, or from a header.
func TestFastLanePassesABacklog(t *testing.T) {
	t.Run("tenant in the subject", func(t *testing.T) {
		testFastLanePassesABacklog(t, nil, func(tenant string) *nats.Msg { return nats.NewMsg("jobs." + tenant) })
	})
	t.Run("tenant in a header", func(t *testing.T) {
		testFastLanePassesABacklog(t, map[string]string{"THROTTLER_TENANT_FROM": "header:Tenant"}, func(tenant string) *nats.Msg {
			m := nats.NewMsg("jobs.any")
			m.Header.Set("Tenant", tenant)
			return m
		})
	})
}

// testFastLanePassesABacklog is TestFastLanePassesABacklog with the
// worker configured with vars and jobs built by job.
func testFastLanePassesABacklog(t *testing.T, vars map[string]string, job func(tenant string) *nats.Msg) {
	e := setup(t)
	all := map[string]string{"THROTTLER_DEFAULT_LIMIT": "100/s:10"}
	for k, v := range vars {
		all[k] = v
	}
	cfg := e.config(all)
	e.ensureStream(cfg)
	burst := make([]jetstream.PubAckFuture, 10000)
	for i := range burst {
		f, err := e.js.PublishMsgAsync(job("a"))
		must(t, err, "publish")
		burst[i] = f
	}
	select {
	case <-e.js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("publishing A's backlog timed out")
	}
	for _, f := range burst {
		select {
		case err := <-f.Err():
			t.Fatalf("publishing A's backlog: %v", err)
		default:
		}
	}

	var r ran
	reached := map[string]uint64{} // B job → the consumer's delivered sequence when it ran
	var mu sync.Mutex
	handler := func(ctx context.Context, job consumer.Job) error {
		r.add(job)
		if job.Tenant == "b" {
			info := e.consumerInfo(cfg.Stream, cfg.Consumer)
			mu.Lock()
			reached[job.ID] = info.Delivered.Stream
			mu.Unlock()
		}
		return nil
	}
	w := e.startWorker(cfg, handler)
	e.waitLaneOn(w, cfg)

	const n = 5
	seqs := make([]uint64, n)
	for i := range seqs {
		m := job("b")
		seqs[i] = e.publish(m.Subject, m.Header, []byte("b"))
	}
	testenv.Eventually(t, 10*time.Second, "B's jobs to run", func() bool {
		for _, s := range seqs {
			if len(r.get(jobID(cfg.Stream, s))) == 0 {
				return false
			}
		}
		return true
	})
	stream, err := e.js.Stream(context.Background(), cfg.Stream)
	must(t, err, "stream")
	for _, s := range seqs {
		id := jobID(cfg.Stream, s)
		runs := r.get(id)
		if len(runs) != 1 {
			t.Errorf("job %s ran %d times", id, len(runs))
			continue
		}
		if runs[0].Header.Get(consumer.HeaderFast) == "" {
			t.Errorf("job %s ran from the jobs consumer, not as a fast copy", id)
		}
		mu.Lock()
		at := reached[id]
		mu.Unlock()
		if at >= s {
			t.Errorf("job %s (sequence %d) ran after the jobs consumer had reached sequence %d", id, s, at)
		}
	}
	// The lane deletes each original once its copy is stored, which may
	// be after the copy ran.
	deleted := func() bool {
		for _, s := range seqs {
			if _, err := stream.GetMsg(context.Background(), s); !errors.Is(err, jetstream.ErrMsgNotFound) {
				return false
			}
		}
		return true
	}
	testenv.Eventually(t, 5*time.Second, "B's originals deleted", deleted)
	// Each was decided once, when the lane took it: its copy ran on that
	// decision, not charged a second time.
	if st := w.stats()["b"]; st.FastLaned != n || st.RedisCalls != n {
		t.Errorf("b: %d jobs fast-laned with %d decisions, want %d and %d", st.FastLaned, st.RedisCalls, n, n)
	}
	// Every job of B ran once, including after the backlog is passed.
	w.stop(t)
	for _, s := range seqs {
		if got := len(r.get(jobID(cfg.Stream, s))); got != 1 {
			t.Errorf("job %d ran %d times by the end", s, got)
		}
	}
	if st := w.stats()["a"]; st.FastLaned != 0 {
		t.Errorf("a, flooding: %d jobs fast-laned, want 0", st.FastLaned)
	}
}

// TestFastLaneInterrupted: a fast lane interrupted between its steps
// neither loses the job nor runs it twice. The state each crash leaves is
// made by hand before a worker starts: a claim without a copy (the lane
// stopped before copying), and a claim with its copy stored but the
// original still in the stream (it stopped before deleting it).
func TestFastLaneInterrupted(t *testing.T) {
	// claim sets up the jobs stream as a worker does, publishes one job of
	// b and claims it for its fast copy.
	claim := func(t *testing.T, e *env, cfg *app.Settings) (id string, seq uint64) {
		t.Helper()
		ctx := context.Background()
		_, err := consumer.EnsureStream(ctx, e.js, consumer.StreamSpec{Name: cfg.Stream, Subjects: cfg.Subjects,
			ScheduleSubjects: []string{cfg.ScheduleSubject + ".>"}})
		must(t, err, "stream")
		seq = e.publish("jobs.b", nil, []byte("b"))
		id = jobID(cfg.Stream, seq)
		lim, err := throttle.New(e.redisClient(cfg), throttle.Options{Rules: cfg.Rules, Horizon: cfg.MaxDefer, Prefix: cfg.KeyPrefix})
		must(t, err, "limiter")
		copies, err := throttle.NewCopies(lim, time.Hour)
		must(t, err, "copies")
		ok, _, err := copies.Claim(ctx, "b", id, fastClaim(seq))
		if err != nil || !ok {
			t.Fatalf("claim: %v, %v", ok, err)
		}
		return id, seq
	}
	// The claim would last 10 min (the horizon); a take lasts at most the
	// Redis timeout + 2s = 2.1s, so a claim whose copy is missing is taken
	// over after 3 × 2.1s + 5s = 11.3s.
	vars := map[string]string{"THROTTLER_DEFAULT_LIMIT": "100/s:10", "THROTTLER_REDIS_TIMEOUT": "100ms"}
	const takeover = 11300 * time.Millisecond

	t.Run("claimed, not copied", func(t *testing.T) {
		e := setup(t)
		cfg := e.config(vars)
		published := time.Now()
		id, _ := claim(t, e, cfg)
		var r ran
		e.startWorker(cfg, func(_ context.Context, job consumer.Job) error { r.add(job); return nil })
		testenv.Eventually(t, 30*time.Second, "the claimed job to run", func() bool { return len(r.get(id)) > 0 })
		time.Sleep(2 * fastRecheckForTest) // a second run would show by now
		if got := len(r.get(id)); got != 1 {
			t.Fatalf("job ran %d times, want once", got)
		}
		if d := r.firstRun(id).Sub(published); d < takeover {
			t.Errorf("job ran %s after it was published, before its claim could be taken over (%s)", d, takeover)
		}
	})

	t.Run("copied, original left", func(t *testing.T) {
		e := setup(t)
		cfg := e.config(vars)
		id, seq := claim(t, e, cfg)
		h := nats.Header{}
		h.Set(consumer.HeaderJobID, id)
		h.Set(consumer.HeaderSubject, "jobs.b")
		h.Set(consumer.HeaderFast, "reserved")
		e.publish(cfg.Schedules.Fast("b", seq), h, []byte("b"))
		var r ran
		w := e.startWorker(cfg, func(_ context.Context, job consumer.Job) error { r.add(job); return nil })
		testenv.Eventually(t, 10*time.Second, "the job to run and its original to be acked", func() bool {
			return len(r.get(id)) > 0 && w.stats()["b"].Duplicates == 1
		})
		time.Sleep(2 * fastRecheckForTest)
		runs := r.get(id)
		if len(runs) != 1 {
			t.Fatalf("job ran %d times, want once", len(runs))
		}
		if runs[0].Header.Get(consumer.HeaderFast) == "" {
			t.Errorf("the original ran, not the copy the job was claimed for")
		}
		if info := e.consumerInfo(cfg.Stream, cfg.Consumer); info.NumAckPending != 0 || info.NumPending != 0 {
			t.Errorf("original not settled: %d ack-pending, %d pending", info.NumAckPending, info.NumPending)
		}
	})
}

// fastRecheckForTest is how long an original claimed by the fast lane waits
// before it is decided again (consumer.fastRecheck).
const fastRecheckForTest = time.Second

// TestFastLaneOffWhereTheStreamCannotServeIt: the fast lane deletes the
// originals it copies and reads arrivals through a second consumer of the
// job subjects, so a stream that denies deletes, that is a work queue
// (which allows one consumer of a subject), or that another consumer reads
// jobs from runs without the lane; a stream of its own gets the lane. The
// stream's configuration is never changed for the lane.
func TestFastLaneOffWhereTheStreamCannotServeIt(t *testing.T) {
	e := setup(t)
	for _, tc := range []struct {
		name  string
		sc    jetstream.StreamConfig
		other bool // another consumer reads the job subjects
		lane  bool
	}{
		{"its own", jetstream.StreamConfig{}, false, true},
		{"republishing elsewhere", jetstream.StreamConfig{RePublish: &jetstream.RePublish{Source: ">", Destination: "mirror.>"}}, false, true},
		{"denying deletes", jetstream.StreamConfig{DenyDelete: true}, false, false},
		{"a work queue", jetstream.StreamConfig{Retention: jetstream.WorkQueuePolicy}, false, false},
		{"read by another consumer", jetstream.StreamConfig{}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.ToUpper(strings.ReplaceAll(tc.name, " ", "_"))
			token := strings.ToLower(name)
			cfg := e.config(map[string]string{"THROTTLER_STREAM": name, "THROTTLER_SUBJECTS": token + ".>",
				"THROTTLER_CONSUMER": token, "THROTTLER_SCHEDULE_SUBJECT": "sched_" + token,
				"THROTTLER_FORWARD_SUBJECT": "done_" + token + ".{tenant}"})
			tc.sc.Name, tc.sc.Subjects = name, []string{token + ".>"}
			e.createJobsStream(tc.sc)
			if tc.other {
				_, err := e.js.CreateOrUpdateConsumer(context.Background(), name, jetstream.ConsumerConfig{Durable: "audit",
					FilterSubject: token + ".acme", AckPolicy: jetstream.AckExplicitPolicy})
				must(t, err, "audit consumer")
			}
			before := e.streamConfig(name)
			e.startWorker(cfg, nil)
			out := e.collect("done_" + token + ".*")
			testenv.Eventually(t, 10*time.Second, "the worker's consumer", func() bool {
				_, err := e.js.Consumer(context.Background(), name, token)
				return err == nil
			})
			want := e.publishJobs(name, token+".acme", nil, 3)
			checkExactlyOnce(t, "forwarded", out.waitCount(t, len(want), 10*time.Second), want)

			after := e.streamConfig(name)
			// The worker binds its schedule subjects and turns schedules
			// on (which the server gives rollups and a feature level
			// with), once, to move jobs; nothing else changes.
			after.Subjects, after.AllowMsgSchedules, after.AllowRollup = before.Subjects, before.AllowMsgSchedules, before.AllowRollup
			after.Metadata = before.Metadata
			if !reflect.DeepEqual(after, before) {
				t.Errorf("the stream's configuration changed beyond the schedule subjects:\n before %+v\n after  %+v", before, after)
			}
			_, ferr := e.js.Consumer(context.Background(), name, token+"_fast")
			if tc.lane != (ferr == nil) {
				t.Errorf("lane %v, but the copies consumer: %v", tc.lane, ferr)
			}
		})
	}
}

// streamConfig returns the configuration of stream name.
func (e *env) streamConfig(name string) jetstream.StreamConfig {
	e.t.Helper()
	s, err := e.js.Stream(context.Background(), name)
	must(e.t, err, "stream %s", name)
	return s.CachedInfo().Config
}

// TestFastLaneKeepsArrivalsOffForANewConsumer: a consumer of the job
// subjects added after the worker started would miss the jobs the lane
// takes, so a backlog no longer turns the stream's arrivals on.
func TestFastLaneKeepsArrivalsOffForANewConsumer(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "100/s:10"})
	w := e.startWorker(cfg, func(context.Context, consumer.Job) error { return nil })
	testenv.Eventually(t, 10*time.Second, "the worker's fast consumer", func() bool {
		_, err := e.js.Consumer(context.Background(), cfg.Stream, cfg.Consumer+"_fast")
		return err == nil
	})
	_, err := e.js.CreateOrUpdateConsumer(context.Background(), cfg.Stream, jetstream.ConsumerConfig{Durable: "audit",
		FilterSubject: "jobs.>", AckPolicy: jetstream.AckExplicitPolicy})
	must(t, err, "audit consumer")
	publishBurst(t, e.js, "jobs.a", 5000)
	testenv.Eventually(t, 10*time.Second, "the worker reading the backlog", func() bool { return w.stats()["a"].Delivered > 1000 })
	time.Sleep(500 * time.Millisecond) // the lane's switch, had it been allowed
	s, err := e.js.Stream(context.Background(), cfg.Stream)
	must(t, err, "stream")
	if rp := s.CachedInfo().Config.RePublish; rp != nil {
		t.Errorf("arrivals republished (%+v) with another consumer of the job subjects", rp)
	}
}

// TestFastCopyRetriedAfterAFailure: a fast copy whose handler fails is
// retried like any job, once, and the job is not lost or run again after
// it succeeds.
func TestFastCopyRetriedAfterAFailure(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "100/s:10"})
	e.ensureStream(cfg)
	publishBurst(t, e.js, "jobs.a", 10000)
	var r ran
	handler := func(_ context.Context, job consumer.Job) error {
		r.add(job)
		if job.Tenant == "b" && len(r.get(job.ID)) == 1 {
			return errors.New("first run fails")
		}
		return nil
	}
	w := e.startWorker(cfg, handler)
	e.waitLaneOn(w, cfg)
	id := jobID(cfg.Stream, e.publish("jobs.b", nil, []byte("b")))
	testenv.Eventually(t, 15*time.Second, "B's job to run again after its failure", func() bool { return len(r.get(id)) >= 2 })
	time.Sleep(2 * time.Second) // a third run would show by now
	runs := r.get(id)
	if len(runs) != 2 {
		t.Fatalf("job ran %d times, want 2 (a failure, then its retry)", len(runs))
	}
	if runs[0].Header.Get(consumer.HeaderFast) == "" {
		t.Errorf("the first run was not the fast copy")
	}
	if st := w.stats()["b"]; st.FastLaned != 1 || st.Failed != 1 || st.Completed != 1 {
		t.Errorf("b: %+v, want 1 fast-laned, 1 failed, 1 completed", st)
	}
}

// TestLanePacesAFlood: while jobs arrive for the lane, a worker puts a
// flood off at no more than THROTTLER_LANE_MOVE_RATE jobs a second, so
// that the flood leaves the machine to the jobs taking the lane. (Flat
// out, the same worker puts the 10,000 jobs off within a second or two.)
func TestLanePacesAFlood(t *testing.T) {
	const rate = 1000
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "100/s:10", "THROTTLER_LANE_MOVE_RATE": strconv.Itoa(rate)})
	e.ensureStream(cfg)
	publishBurst(t, e.js, "jobs.a", 10000)
	w := e.startWorker(cfg, func(context.Context, consumer.Job) error { return nil })
	e.waitLaneOn(w, cfg)

	// B's jobs keep arriving, every 50 ms: the lane is in use.
	stop, done := make(chan struct{}), make(chan struct{})
	var published atomic.Int64
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				if _, err := e.js.Publish(ctx, "jobs.b", []byte("b")); err == nil {
					published.Add(1)
				}
				cancel()
			}
		}
	}()
	defer func() { close(stop); <-done }()
	testenv.Eventually(t, 10*time.Second, "B's first job to take the lane", func() bool { return w.stats()["b"].FastLaned > 0 })

	const window = 2 * time.Second
	from := w.stats()["a"].Deferred
	time.Sleep(window) // measuring a rate over a window
	got := w.stats()["a"].Deferred - from
	// The pace's own allowance over the window, plus the groups decided
	// before it and counted in it, and one group past its pause.
	limit := int64(rate*window/time.Second) + 4*64
	if got > limit {
		t.Errorf("a: %d jobs deferred in %v while B took the lane, want at most %d (%d/s)", got, window, limit, rate)
	}
	if got == 0 {
		t.Errorf("a: no job deferred in %v: the pace stalled the worker", window)
	}
	if published.Load() == 0 {
		t.Error("B published nothing")
	}
}

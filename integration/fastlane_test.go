package integration

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
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
	"github.com/throttler/throttler/fastlane/fastcopy"
	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/internal/ops"
	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/streams"
	"github.com/throttler/throttler/throttle"
)

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
	publishFlood(t, e.js, 10000, func() *nats.Msg { return job("a") })

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
		if runs[0].Header.Get(fastcopy.Header) == "" {
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
	countsOnly(t)
	// claim sets up the jobs stream as a worker does, publishes one job of
	// b and claims it for its fast copy.
	claim := func(t *testing.T, e *env, cfg *app.Settings) (id string, seq uint64) {
		t.Helper()
		ctx := context.Background()
		_, err := streams.EnsureStream(ctx, e.js, streams.StreamSpec{Name: cfg.Stream, Subjects: cfg.Subjects,
			ScheduleSubjects: []string{cfg.ScheduleSubject + ".>"}})
		must(t, err, "stream")
		seq = e.publish("jobs.b", nil, []byte("b"))
		id = jobID(cfg.Stream, seq)
		lim, err := throttle.New(e.redisClient(cfg), throttle.Options{Policies: cfg.Rules, Horizon: cfg.MaxDefer, Prefix: cfg.KeyPrefix})
		must(t, err, "limiter")
		owners, err := throttle.NewOwners(lim)
		must(t, err, "owners")
		ok, _, err := owners.Claim(ctx, "b", id, fastcopy.Incarnation(seq))
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
		// Once every message the job might run from is settled, it cannot
		// run again.
		e.waitDrained(cfg, 10*time.Second, cfg.Consumer, cfg.Consumer+"_fast")
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
		h.Set(header.JobID, id)
		h.Set(header.Subject, "jobs.b")
		h.Set(fastcopy.Header, "reserved")
		e.publish(cfg.Schedules.Fast("b", seq), h, []byte("b"))
		var r ran
		w := e.startWorker(cfg, func(_ context.Context, job consumer.Job) error { r.add(job); return nil })
		testenv.Eventually(t, 10*time.Second, "the job to run and its original to be acked", func() bool {
			return len(r.get(id)) > 0 && w.stats()["b"].Duplicates == 1
		})
		// The original and the copy settled: nothing left to run the job.
		e.waitDrained(cfg, 10*time.Second, cfg.Consumer, cfg.Consumer+"_fast")
		runs := r.get(id)
		if len(runs) != 1 {
			t.Fatalf("job ran %d times, want once", len(runs))
		}
		if runs[0].Header.Get(fastcopy.Header) == "" {
			t.Errorf("the original ran, not the copy the job was claimed for")
		}
	})
}

// publishFlood publishes n messages made by msg, asynchronously, and
// waits until each is acked. Unlike publishBurst it waits as long as it
// takes for room among the publishes under way (a busy machine acks
// slowly), within a deadline.
func publishFlood(t *testing.T, js jetstream.JetStream, n int, msg func() *nats.Msg) {
	t.Helper()
	const within = 60 * time.Second
	futures := make([]jetstream.PubAckFuture, n)
	for i := range futures {
		f, err := js.PublishMsgAsync(msg(), jetstream.WithStallWait(within))
		must(t, err, "publish")
		futures[i] = f
	}
	deadline := time.After(within)
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatalf("publishing the flood: %v", err)
		case <-deadline:
			t.Fatalf("publishing the flood: no ack within %v", within)
		}
	}
}

// drained reports whether each named consumer of cfg's stream exists and
// has nothing left to deliver and nothing delivered unacked (a message
// NAK'd with a delay counts as unacked until it is redelivered).
func (e *env) drained(cfg *app.Settings, consumers ...string) bool {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, name := range consumers {
		c, err := e.js.Consumer(ctx, cfg.Stream, name)
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		if err != nil || info.NumPending != 0 || info.NumAckPending != 0 {
			return false
		}
	}
	return true
}

// waitDrained waits until each named consumer of cfg's stream is drained.
func (e *env) waitDrained(cfg *app.Settings, timeout time.Duration, consumers ...string) {
	e.t.Helper()
	testenv.Eventually(e.t, timeout, "consumers "+strings.Join(consumers, ", ")+" to have nothing pending or unacked", func() bool {
		return e.drained(cfg, consumers...)
	})
}

// gone reports whether the message stored at seq in cfg's stream is gone.
func (e *env) gone(cfg *app.Settings, seq uint64) bool {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := e.js.Stream(ctx, cfg.Stream)
	if err != nil {
		return false
	}
	_, err = s.GetMsg(ctx, seq)
	return errors.Is(err, jetstream.ErrMsgNotFound)
}

// consumerExists reports whether cfg's stream exists with a consumer named
// name; it fails the test when that cannot be known.
func (e *env) consumerExists(cfg *app.Settings, name string) bool {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := e.js.Consumer(ctx, cfg.Stream, name)
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
		e.t.Fatalf("consumer %s: %v", name, err)
	}
	return err == nil
}

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
		// scanned: an operator's command read the job subjects just
		// before (its consumer lingers a few seconds).
		scanned bool
	}{
		{"its own", jetstream.StreamConfig{}, false, true, false},
		{"republishing elsewhere", jetstream.StreamConfig{RePublish: &jetstream.RePublish{Source: ">", Destination: "mirror.>"}}, false, true, false},
		{"denying deletes", jetstream.StreamConfig{DenyDelete: true}, false, false, false},
		{"a work queue", jetstream.StreamConfig{Retention: jetstream.WorkQueuePolicy}, false, false, false},
		{"read by another consumer", jetstream.StreamConfig{}, true, false, false},
		{"scanned by a command", jetstream.StreamConfig{}, false, true, true},
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
			var early map[string]bool
			if tc.scanned {
				early = e.publishJobs(name, token+".acme", nil, 1)
				rep, err := ops.PurgeTenant(context.Background(), cfg.Fleet(e.js), ops.PurgeOptions{Tenant: "acme", DryRun: true})
				must(t, err, "purge dry run")
				if rep.Pending != 1 {
					t.Fatalf("purge dry run found %d pending, want 1: it read nothing", rep.Pending)
				}
				st, err := e.js.Stream(context.Background(), name)
				must(t, err, "stream %s", name)
				consumers := 0
				for range st.ConsumerNames(context.Background()).Name() {
					consumers++
				}
				if consumers == 0 {
					t.Fatal("no consumer of the purge's left: the case tries nothing")
				}
			}
			before := e.streamConfig(name)
			e.startWorker(cfg, nil)
			out := e.collect("done_" + token + ".*")
			testenv.Eventually(t, 10*time.Second, "the worker's consumer", func() bool {
				_, err := e.js.Consumer(context.Background(), name, token)
				return err == nil
			})
			want := e.publishJobs(name, token+".acme", nil, 3)
			maps.Copy(want, early)
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
// takes, so a backlog no longer makes the lane read arrivals: it says so,
// and creates no arrivals consumer.
func TestFastLaneKeepsArrivalsOffForANewConsumer(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "100/s:10"})
	_, logs := e.startWorkerLogged(cfg, func(context.Context, consumer.Job) error { return nil })
	testenv.Eventually(t, 10*time.Second, "the worker's fast consumer", func() bool {
		return e.consumerExists(cfg, cfg.Consumer+"_fast")
	})
	_, err := e.js.CreateOrUpdateConsumer(context.Background(), cfg.Stream, jetstream.ConsumerConfig{Durable: "audit",
		FilterSubject: "jobs.>", AckPolicy: jetstream.AckExplicitPolicy})
	must(t, err, "audit consumer")
	before := e.streamConfig(cfg.Stream)
	publishFlood(t, e.js, 5000, func() *nats.Msg { return &nats.Msg{Subject: "jobs.a", Data: []byte("a")} })
	testenv.Eventually(t, 10*time.Second, "the lane's warning that it does not read arrivals", func() bool {
		return logs.contains("fast lane: not reading arrivals") && logs.contains("consumer=audit")
	})
	if e.consumerExists(cfg, cfg.Consumer+"_arrivals") {
		t.Errorf("the arrivals consumer exists with another consumer of the job subjects")
	}
	if after := e.streamConfig(cfg.Stream); !reflect.DeepEqual(after, before) {
		t.Errorf("the stream's configuration changed:\n before %+v\n after  %+v", before, after)
	}
}

// TestFastLaneOff: with THROTTLER_FAST_LANE=off the worker runs jobs
// through its jobs consumer alone: a backlog creates neither the lane's
// copies consumer nor its arrivals consumer, and a job of another tenant
// behind it runs from the jobs consumer.
func TestFastLaneOff(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "100/s:10", "THROTTLER_FAST_LANE": "off"})
	e.ensureStream(cfg)
	const n = 5000
	publishFlood(t, e.js, n, func() *nats.Msg { return &nats.Msg{Subject: "jobs.a", Data: []byte("a")} })
	id := jobID(cfg.Stream, e.publish("jobs.b", nil, []byte("b")))
	var r ran
	w := e.startWorker(cfg, func(_ context.Context, job consumer.Job) error { r.add(job); return nil })
	testenv.Eventually(t, 30*time.Second, "the backlog delivered to the worker", func() bool {
		return w.stats()["a"].Delivered >= n
	})
	testenv.Eventually(t, 30*time.Second, "B's job behind the backlog to run", func() bool { return len(r.get(id)) > 0 })
	for _, name := range []string{cfg.Consumer + "_fast", cfg.Consumer + "_arrivals"} {
		if e.consumerExists(cfg, name) {
			t.Errorf("consumer %s exists with the fast lane off", name)
		}
	}
	if runs := r.get(id); runs[0].Header.Get(fastcopy.Header) != "" {
		t.Errorf("B's job ran as a fast copy with the fast lane off")
	}
	if st := w.stats()["b"]; st.FastLaned != 0 {
		t.Errorf("b: %d jobs fast-laned with the fast lane off", st.FastLaned)
	}
}

// TestFastLaneLeavesTheJobsStreamAlone: a backlog the lane serves, from
// the moment the lane reads arrivals until it has passed jobs through it,
// leaves the jobs stream's configuration as the worker set it up. The
// lane reads arrivals through a consumer of its own: headers only, no
// acks, new messages only, one replica in memory, gone after 30s unread.
func TestFastLaneLeavesTheJobsStreamAlone(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "100/s:10"})
	var r ran
	w := e.startWorker(cfg, func(_ context.Context, job consumer.Job) error { r.add(job); return nil })
	testenv.Eventually(t, 10*time.Second, "the worker's set-up", func() bool {
		return e.consumerExists(cfg, cfg.Consumer+"_fast")
	})
	before := e.streamConfig(cfg.Stream)
	publishFlood(t, e.js, 10000, func() *nats.Msg { return &nats.Msg{Subject: "jobs.a", Data: []byte("a")} })
	e.waitLaneOn(w, cfg)
	if during := e.streamConfig(cfg.Stream); !reflect.DeepEqual(during, before) {
		t.Errorf("the stream's configuration changed when the lane started reading arrivals:\n before %+v\n during %+v", before, during)
	}

	ac := e.consumerInfo(cfg.Stream, cfg.Consumer+"_arrivals").Config
	filters := ac.FilterSubjects
	if ac.FilterSubject != "" {
		filters = append(filters, ac.FilterSubject)
	}
	if !ac.HeadersOnly || ac.AckPolicy != jetstream.AckNonePolicy || ac.DeliverPolicy != jetstream.DeliverByStartSequencePolicy ||
		ac.Replicas != 1 || !ac.MemoryStorage || ac.InactiveThreshold != 30*time.Second || !reflect.DeepEqual(filters, cfg.Subjects) {
		t.Errorf("arrivals consumer: headers only %v, ack %v, deliver %v, replicas %d, memory %v, inactive after %v, filters %v; "+
			"want true, none, by_start_sequence, 1, true, 30s, %v",
			ac.HeadersOnly, ac.AckPolicy, ac.DeliverPolicy, ac.Replicas, ac.MemoryStorage, ac.InactiveThreshold, filters, cfg.Subjects)
	}

	const n = 3
	seqs := make([]uint64, n)
	for i := range seqs {
		seqs[i] = e.publish("jobs.b", nil, []byte("b"))
	}
	testenv.Eventually(t, 10*time.Second, "B's jobs passing the backlog, their originals deleted", func() bool {
		for _, s := range seqs {
			if len(r.get(jobID(cfg.Stream, s))) == 0 || !e.gone(cfg, s) {
				return false
			}
		}
		return w.stats()["b"].FastLaned == n
	})
	if after := e.streamConfig(cfg.Stream); !reflect.DeepEqual(after, before) {
		t.Errorf("the stream's configuration changed while the lane passed jobs:\n before %+v\n after  %+v", before, after)
	}
}

// logBuffer keeps a worker's log lines for a test to read.
type logBuffer struct{ testenv.Buffer }

// contains reports whether a line logged so far contains s.
func (b *logBuffer) contains(s string) bool { return strings.Contains(b.String(), s) }

// startWorkerLogged is startWorker with the worker's logs, from Info up,
// kept in the returned buffer (and shown with -v).
func (e *env) startWorkerLogged(cfg *app.Settings, handler consumer.Handler) (*worker, *logBuffer) {
	e.t.Helper()
	logs := &logBuffer{}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(logs, logSink()), &slog.HandlerOptions{Level: slog.LevelInfo}))
	return e.startWorkerWith(cfg, handler, log), logs
}

// TestFastCopyRetriedAfterAFailure: a fast copy whose handler fails is
// retried like any job, once, and the job is not lost or run again after
// it succeeds.
func TestFastCopyRetriedAfterAFailure(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "100/s:10"})
	e.ensureStream(cfg)
	publishFlood(t, e.js, 10000, func() *nats.Msg { return &nats.Msg{Subject: "jobs.a", Data: []byte("a")} })
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
	seq := e.publish("jobs.b", nil, []byte("b"))
	id := jobID(cfg.Stream, seq)
	testenv.Eventually(t, 15*time.Second, "B's job to run again after its failure", func() bool { return len(r.get(id)) >= 2 })
	// The retry succeeded and was acked, the original is deleted and the
	// copy settled: no message is left to run the job a third time.
	testenv.Eventually(t, 10*time.Second, "B's job completed, its original deleted and its copy settled", func() bool {
		return w.stats()["b"].Completed == 1 && e.gone(cfg, seq) && e.drained(cfg, cfg.Consumer+"_fast")
	})
	runs := r.get(id)
	if len(runs) != 2 {
		t.Fatalf("job ran %d times, want 2 (a failure, then its retry)", len(runs))
	}
	if runs[0].Header.Get(fastcopy.Header) == "" {
		t.Errorf("the first run was not the fast copy")
	}
	if st := w.stats()["b"]; st.FastLaned != 1 || st.Failed != 1 || st.Completed != 1 {
		t.Errorf("b: %+v, want 1 fast-laned, 1 failed, 1 completed", st)
	}
}

// TestLanePacesAFlood: while jobs arrive for the lane, a worker puts a
// flood off at no more than THROTTLER_LANE_MOVE_RATE jobs a second, so
// that the flood leaves the machine to the jobs taking the lane: putting
// off 1,500 jobs at 1,000/s takes at least 1.24s. (Flat out, the same
// worker puts them off in well under 100ms.)
func TestLanePacesAFlood(t *testing.T) {
	const rate = 1000
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "100/s:10", "THROTTLER_LANE_MOVE_RATE": strconv.Itoa(rate)})
	e.ensureStream(cfg)
	publishFlood(t, e.js, 10000, func() *nats.Msg { return &nats.Msg{Subject: "jobs.a", Data: []byte("a")} })
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

	// Time how long the worker takes to put off the next k of A's jobs.
	const k = 1500
	from := w.stats()["a"].Deferred
	if left := 10000 - from; left < k+1000 {
		t.Fatalf("a: %d of 10,000 jobs deferred before B took the lane, %d left: too few to time the pace", from, left)
	}
	start := time.Now()
	testenv.Eventually(t, 10*time.Second, "the worker to put off 1,500 more of A's jobs (else the pace stalled it)", func() bool {
		return w.stats()["a"].Deferred-from >= k
	})
	took := time.Since(start)
	// The pace's allowance, less the groups decided before the start and
	// counted after it, and one group past its pause.
	least := time.Duration(k-4*64) * time.Second / rate
	if took < least {
		t.Errorf("a: %d jobs deferred in %v while B took the lane, want %v at least (%d/s)", k, took, least, rate)
	}
	t.Logf("a: %d deferred before B took the lane; %d more in %v (at most %d/s)", from, k, took, rate)
	if published.Load() == 0 {
		t.Error("B published nothing")
	}
}

// TestFastLaneLeavesAFloodInOrder: a tenant that floods the queue alone
// has jobs queued in the backlog the lane reads first, so the lane takes
// none of its later jobs out of order: each of them runs after the
// tenant's earlier ones.
func TestFastLaneLeavesAFloodInOrder(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "100/s:10"})
	var r ran
	w := e.startWorker(cfg, func(_ context.Context, job consumer.Job) error { r.add(job); return nil })
	testenv.Eventually(t, 10*time.Second, "the worker's consumers", func() bool {
		return e.consumerExists(cfg, cfg.Consumer+"_fast")
	})
	publishFlood(t, e.js, 5000, func() *nats.Msg { return nats.NewMsg("jobs.a") })
	e.waitLaneOn(w, cfg)
	// The lane has read every arrival of the flood once its consumer has
	// nothing left to deliver.
	testenv.Eventually(t, 20*time.Second, "the lane reading the whole flood", func() bool {
		return e.drained(cfg, cfg.Consumer+"_arrivals")
	})
	if n := w.stats()["a"].FastLaned; n != 0 {
		t.Fatalf("the lane took %d of the flooding tenant's jobs out of its queue", n)
	}
}

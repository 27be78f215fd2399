package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/internal/testenv"
)

// handlerCall is one call of a test handler.
type handlerCall struct {
	at        time.Time
	delivered uint64
}

// callLog records every handler call per job id. Safe for concurrent use.
type callLog struct {
	mu    sync.Mutex
	byJob map[string][]handlerCall
	order []string // job ids in call order, one entry per call
}

func newCallLog() *callLog { return &callLog{byJob: map[string][]handlerCall{}} }

// wrap returns a handler that records the call, then runs next.
func (l *callLog) wrap(next consumer.Handler) consumer.Handler {
	return func(ctx context.Context, job consumer.Job) error {
		l.mu.Lock()
		l.byJob[job.ID] = append(l.byJob[job.ID], handlerCall{at: time.Now(), delivered: job.Delivered})
		l.order = append(l.order, job.ID)
		l.mu.Unlock()
		return next(ctx, job)
	}
}

// calls returns the calls of job id.
func (l *callLog) calls(id string) []handlerCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]handlerCall(nil), l.byJob[id]...)
}

// times returns the time of every call, in call order.
func (l *callLog) times() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]time.Time, 0, len(l.order))
	seen := map[string]int{}
	for _, id := range l.order {
		out = append(out, l.byJob[id][seen[id]].at)
		seen[id]++
	}
	return out
}

// checkExactlyOnce fails unless msgs holds each id of want exactly once and
// nothing else.
func checkExactlyOnce(t *testing.T, what string, msgs []collected, want map[string]bool) {
	t.Helper()
	seen := map[string]int{}
	for _, m := range msgs {
		seen[m.jobID]++
		if !want[m.jobID] {
			t.Errorf("%s: unexpected job %q on %s", what, m.jobID, m.subject)
		}
	}
	missing := 0
	for id := range want {
		switch n := seen[id]; {
		case n == 0:
			missing++
		case n > 1:
			t.Errorf("%s: job %s seen %d times, want once", what, id, n)
		}
	}
	if missing > 0 {
		t.Errorf("%s: %d of %d jobs missing", what, missing, len(want))
	}
}

// TestJobDeferredFiftyTimesIsStillProcessed: a job told to come back again
// and again (its slot lies past the tiny reservation horizon) is never
// dropped or dead-lettered for it, and runs once its slot is due.
func TestJobDeferredFiftyTimesIsStillProcessed(t *testing.T) {
	e := setup(t)
	// One job per 3 s and a 10 ms horizon: the second job comes back every
	// ~11 ms for about 3 s.
	cfg := e.config(map[string]string{
		"THROTTLER_TENANT_LIMITS": "slow=1/3s:1",
		"THROTTLER_MAX_DEFER":     "10ms",
		"THROTTLER_DEFER":         "nak",
	})
	e.ensureStream(cfg)
	log := newCallLog()
	w := e.startWorker(cfg, log.wrap(consumer.Forwarder(e.js, cfg.Forward)))
	out := e.collect("done.*")
	dlq := e.collect("dlq.*")

	first := jobID(cfg.Stream, e.publish("jobs.slow", nil, []byte("1")))
	second := jobID(cfg.Stream, e.publish("jobs.slow", nil, []byte("2")))
	checkExactlyOnce(t, "forwarded", out.waitCount(t, 2, 20*time.Second), map[string]bool{first: true, second: true})
	w.waitCompleted(t, "slow", 2)
	e.waitSettled(t, cfg, 10*time.Second)

	c1, c2 := log.calls(first), log.calls(second)
	if len(c1) != 1 || len(c2) != 1 {
		t.Fatalf("handler calls: first %d, second %d; want 1 each", len(c1), len(c2))
	}
	if gap := c2[0].at.Sub(c1[0].at); gap < 2900*time.Millisecond {
		t.Errorf("second job ran %s after the first; the limit 1/3s allows it after 3s", gap)
	}
	if c2[0].delivered < 51 {
		t.Errorf("second job ran at delivery %d, want ≥ 51 (≥ 50 deferrals)", c2[0].delivered)
	}
	st := w.stats()["slow"]
	if st.Deferred < 50 {
		t.Errorf("deferrals = %d, want ≥ 50", st.Deferred)
	}
	if st.Completed != 2 || st.DeadLettered != 0 || st.Failed != 0 {
		t.Errorf("stats %+v: want 2 completed, nothing failed or dead-lettered", st)
	}
	if got := dlq.waitAll(t, 10*time.Second); len(got) != 0 {
		t.Errorf("%d dead letters, want none: first %+v", len(got), got[0])
	}
}

// badJob is a message that must be dead-lettered.
type badJob struct {
	name    string
	subject string
	header  nats.Header
	dlq     string // expected dead-letter subject
	keyword string // the reason must mention it
}

// TestBadJobsAreDeadLettered: malformed jobs go to the dead-letter subject
// once each, with a reason, and the good jobs published among them are all
// forwarded.
func TestBadJobsAreDeadLettered(t *testing.T) {
	hdr := func(kv ...string) nats.Header {
		h := nats.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return h
	}
	// good's burst is 100, so a cost of 101 can never be admitted.
	badCosts := func(subject string, h func(cost string) nats.Header) []badJob {
		var out []badJob
		for _, c := range []string{"abc", "-1", "1e9", "0", "", "1.5", "101", "1000000000", "99999999999"} {
			out = append(out, badJob{name: "cost " + strconv.Quote(c), subject: subject, header: h(c), dlq: "dlq.good", keyword: "cost"})
		}
		return out
	}

	t.Run("TenantFromHeader", func(t *testing.T) {
		bad := []badJob{
			{name: "no tenant", subject: "jobs.x", header: nil, dlq: "dlq._invalid", keyword: "tenant"},
			{name: "empty tenant", subject: "jobs.x", header: hdr("Tenant", ""), dlq: "dlq._invalid", keyword: "tenant"},
			{name: "10 kB tenant", subject: "jobs.x", header: hdr("Tenant", strings.Repeat("a", 10_000)), dlq: "dlq._invalid", keyword: "tenant"},
			{name: "129-byte tenant", subject: "jobs.x", header: hdr("Tenant", strings.Repeat("b", 129)), dlq: "dlq._invalid", keyword: "tenant"},
			{name: "braces and colon", subject: "jobs.x", header: hdr("Tenant", "{}:"), dlq: "dlq._invalid", keyword: "tenant"},
			{name: "spaces", subject: "jobs.x", header: hdr("Tenant", "acme corp"), dlq: "dlq._invalid", keyword: "tenant"},
			{name: "dot", subject: "jobs.x", header: hdr("Tenant", "a.b"), dlq: "dlq._invalid", keyword: "tenant"},
			{name: "wildcard", subject: "jobs.x", header: hdr("Tenant", ">"), dlq: "dlq._invalid", keyword: "tenant"},
			{name: "two tenants", subject: "jobs.x", header: hdr("Tenant", "good", "Tenant", "other"), dlq: "dlq._invalid", keyword: "tenant"},
		}
		bad = append(bad, badCosts("jobs.x", func(c string) nats.Header { return hdr("Tenant", "good", "Job-Cost", c) })...)
		bad = append(bad, badJob{name: "two costs", subject: "jobs.x", header: hdr("Tenant", "good", "Job-Cost", "1", "Job-Cost", "2"), dlq: "dlq.good", keyword: "cost"})
		runBadJobs(t, map[string]string{"THROTTLER_TENANT_FROM": "header:Tenant"}, bad,
			func() (string, nats.Header) { return "jobs.x", hdr("Tenant", "good") })
	})

	t.Run("TenantFromSubject", func(t *testing.T) {
		bad := []badJob{
			{name: "braces and colon", subject: "jobs.{}:", dlq: "dlq._invalid", keyword: "tenant"},
			{name: "129-byte tenant", subject: "jobs." + strings.Repeat("c", 129), dlq: "dlq._invalid", keyword: "tenant"},
			{name: "non-ASCII", subject: "jobs.café", dlq: "dlq._invalid", keyword: "tenant"},
			{name: "tilde", subject: "jobs.a~b", dlq: "dlq._invalid", keyword: "tenant"},
		}
		bad = append(bad, badCosts("jobs.good", func(c string) nats.Header { return hdr("Job-Cost", c) })...)
		runBadJobs(t, nil, bad, func() (string, nats.Header) { return "jobs.good", nil })
	})
}

// runBadJobs runs a worker with vars, publishes bad interleaved with good
// jobs, and checks that every bad job is dead-lettered once with a reason
// and every good one forwarded once.
func runBadJobs(t *testing.T, vars map[string]string, bad []badJob, good func() (string, nats.Header)) {
	e := setup(t)
	all := map[string]string{
		"THROTTLER_DEFAULT_LIMIT": "1000/s",
		"THROTTLER_TENANT_LIMITS": "good=1000/s:100",
		"THROTTLER_FETCH_BATCH":   "8", // several batches, each mixing bad and good jobs
	}
	for k, v := range vars {
		all[k] = v
	}
	cfg := e.config(all)
	e.ensureStream(cfg)
	w := e.startWorker(cfg, nil)
	out := e.collect("done.*")
	dlq := e.collect("dlq.*")

	wantGood := map[string]bool{}
	wantBad := map[string]badJob{}
	publishGood := func() {
		subj, h := good()
		wantGood[jobID(cfg.Stream, e.publish(subj, h, []byte("good")))] = true
	}
	for _, b := range bad {
		publishGood()
		wantBad[jobID(cfg.Stream, e.publish(b.subject, b.header, []byte(b.name)))] = b
		publishGood()
	}

	letters := dlq.waitCount(t, len(bad), 20*time.Second)
	checkExactlyOnce(t, "forwarded", out.waitCount(t, len(wantGood), 20*time.Second), wantGood)
	w.waitCompleted(t, "good", int64(len(wantGood)))
	e.waitSettled(t, cfg, 10*time.Second)

	letters = dlq.waitAll(t, 10*time.Second) // every dead letter the stream holds
	seen := map[string]int{}
	for _, m := range letters {
		seen[m.jobID]++
		b, ok := wantBad[m.jobID]
		if !ok {
			t.Errorf("unexpected dead letter %q on %s: %s", m.jobID, m.subject, m.reason)
			continue
		}
		if m.subject != b.dlq {
			t.Errorf("%s: dead-lettered to %s, want %s", b.name, m.subject, b.dlq)
		}
		if !strings.Contains(strings.ToLower(m.reason), b.keyword) {
			t.Errorf("%s: reason %q does not mention %s", b.name, m.reason, b.keyword)
		}
		if b.dlq == "dlq.good" && m.tenant != "good" {
			t.Errorf("%s: dead letter tenant header %q, want good", b.name, m.tenant)
		}
	}
	for id, b := range wantBad {
		if seen[id] != 1 {
			t.Errorf("%s (%s): dead-lettered %d times, want once", b.name, id, seen[id])
		}
	}
	if got := len(out.waitAll(t, 10*time.Second)); got != len(wantGood) {
		t.Errorf("%d forwarded, want %d", got, len(wantGood))
	}
	st := w.stats()
	if got := st["good"].Completed; got != int64(len(wantGood)) {
		t.Errorf("good completed %d, want %d", got, len(wantGood))
	}
	var dead int64
	for _, s := range st {
		dead += s.DeadLettered
	}
	if dead != int64(len(bad)) {
		t.Errorf("stats count %d dead letters, want %d", dead, len(bad))
	}
}

// TestHandlerFailuresAreRetriedThenDeadLettered: a job whose handler keeps
// failing, or panicking, runs MaxFailures times with growing delays, then
// goes to the dead-letter subject; the other jobs are unaffected.
//
// The first retry waits RetryInitial (1s, not settable from the
// environment) and the second twice that, so this test takes about 3 s.
func TestHandlerFailuresAreRetriedThenDeadLettered(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "1000/s", "THROTTLER_MAX_FAILURES": "3"})
	e.ensureStream(cfg)

	// Sequences start at 1 in the fresh stream.
	failing, panicking := jobID(cfg.Stream, 4), jobID(cfg.Stream, 7)
	forward := consumer.Forwarder(e.js, cfg.Forward)
	log := newCallLog()
	w := e.startWorker(cfg, log.wrap(func(ctx context.Context, job consumer.Job) error {
		switch job.ID {
		case failing:
			return errors.New("database unreachable: connection refused")
		case panicking:
			panic("nil map in job handler")
		}
		return forward(ctx, job)
	}))
	out := e.collect("done.*")
	dlq := e.collect("dlq.*")

	wantGood := map[string]bool{}
	for i := 1; i <= 12; i++ {
		id := jobID(cfg.Stream, e.publish("jobs.acme", nil, []byte("x")))
		if id != failing && id != panicking {
			wantGood[id] = true
		}
	}

	checkExactlyOnce(t, "forwarded", out.waitCount(t, len(wantGood), 10*time.Second), wantGood)
	letters := dlq.waitCount(t, 2, 20*time.Second)
	w.waitCompleted(t, "acme", int64(len(wantGood)))
	e.waitSettled(t, cfg, 10*time.Second)

	reasons := map[string]string{failing: "database unreachable: connection refused", panicking: "nil map in job handler"}
	for _, m := range letters {
		want, ok := reasons[m.jobID]
		if !ok {
			t.Errorf("unexpected dead letter %q: %s", m.jobID, m.reason)
			continue
		}
		delete(reasons, m.jobID)
		if m.subject != "dlq.acme" {
			t.Errorf("%s dead-lettered to %s, want dlq.acme", m.jobID, m.subject)
		}
		if got := m.header.Get(header.Failures); got != "3" {
			t.Errorf("%s: %s = %q, want 3", m.jobID, header.Failures, got)
		}
		if !strings.Contains(m.reason, want) {
			t.Errorf("%s: reason %q does not contain the handler's error %q", m.jobID, m.reason, want)
		}
		if m.jobID == panicking && !strings.Contains(m.reason, "panic") {
			t.Errorf("%s: reason %q does not say the handler panicked", m.jobID, m.reason)
		}
	}
	if len(reasons) != 0 {
		t.Errorf("not dead-lettered: %v", reasons)
	}

	for _, id := range []string{failing, panicking} {
		calls := log.calls(id)
		if len(calls) != 3 {
			t.Errorf("%s: handler called %d times, want 3", id, len(calls))
			continue
		}
		// Retry n waits RetryInitial × 2^(n-1) ± 20%.
		if gap := calls[1].at.Sub(calls[0].at); gap < 800*time.Millisecond {
			t.Errorf("%s: first retry after %s, want ≥ 0.8s", id, gap)
		}
		if gap := calls[2].at.Sub(calls[1].at); gap < 1600*time.Millisecond {
			t.Errorf("%s: second retry after %s, want ≥ 1.6s", id, gap)
		}
	}
	for id := range wantGood {
		if n := len(log.calls(id)); n != 1 {
			t.Errorf("good job %s: handler called %d times, want 1", id, n)
		}
	}
	st := w.stats()["acme"]
	if st.Failed != 6 || st.DeadLettered != 2 || st.Completed != int64(len(wantGood)) {
		t.Errorf("stats %+v: want 6 failed, 2 dead-lettered, %d completed", st, len(wantGood))
	}
}

// TestRedisRestartedMidRun: redis-server is killed and started empty (no
// state, no script) while one tenant publishes at twice its limit. No job
// is lost or run twice, admissions never exceed the limit within one Redis
// lifetime (a restart forgets the bucket, so it may allow one more burst),
// nothing is admitted while Redis is down, and throughput recovers.
func TestRedisRestartedMidRun(t *testing.T) {
	const (
		rate    = 50 // per second, burst 50
		publish = 100
		jobs    = 450 // 4.5 s of publishing at 2× the limit
	)
	e := setup(t)
	// A decision waits at most 300 ms, so the 1 s outage fails some. A
	// job whose NAK is lost in the outage comes back after AckWait: 5 s,
	// so that the test sees it.
	cfg := e.config(map[string]string{"THROTTLER_TENANT_LIMITS": "steady=50/s", "THROTTLER_DEFER": "nak",
		"THROTTLER_REDIS_TIMEOUT": "300ms", "THROTTLER_ACK_WAIT": "5s"})
	e.ensureStream(cfg)
	log := newCallLog()
	w := e.startWorker(cfg, log.wrap(consumer.Forwarder(e.js, cfg.Forward)))
	out := e.collect("done.*")

	want := map[string]bool{}
	var stopDone, startBegin time.Time
	tick := time.NewTicker(time.Second / publish)
	defer tick.Stop()
	for i := 0; i < jobs; i++ {
		<-tick.C
		switch i {
		case 200: // after 2 s
			e.redis.Stop(t)
			stopDone = time.Now()
		case 300: // down for 1 s
			startBegin = time.Now()
			e.redis.Start(t)
		}
		want[jobID(cfg.Stream, e.publish("jobs.steady", nil, []byte(strconv.Itoa(i))))] = true
	}
	checkExactlyOnce(t, "forwarded", out.waitCount(t, jobs, 30*time.Second), want)
	e.waitSettled(t, cfg, 10*time.Second)
	checkExactlyOnce(t, "forwarded", out.waitAll(t, 10*time.Second), want)
	for id := range want {
		if n := len(log.calls(id)); n != 1 {
			t.Errorf("job %s: handler called %d times, want 1", id, n)
		}
	}

	times := log.times()
	var before, during, after []time.Time
	for _, at := range times {
		switch {
		case at.Before(stopDone.Add(200 * time.Millisecond)):
			before = append(before, at) // decided by the first Redis
		case at.Before(startBegin):
			during = append(during, at)
		default:
			after = append(after, at)
		}
	}
	t.Logf("admitted %d before the outage, %d during, %d after", len(before), len(during), len(after))
	if len(during) > 0 {
		t.Errorf("%d jobs admitted while Redis was down (policy defer)", len(during))
	}
	if len(after) < jobs/3 {
		t.Errorf("only %d of %d jobs admitted after the restart; throughput did not recover", len(after), jobs)
	}
	// Within one Redis lifetime, any window holds at most burst + rate × its
	// length, plus a slack of 10 jobs (200 ms) for the gap between the
	// decision and the handler's clock reading.
	for _, life := range [][]time.Time{before, after} {
		checkAdmissionRate(t, life, rate, rate, 10)
	}
	checkAdmissionRate(t, times, rate, 2*rate, 10)

	st := w.stats()["steady"]
	if st.RedisErrors == 0 {
		t.Errorf("stats %+v: no Redis errors counted while Redis was down", st)
	}
	if st.AllowedOnRedisError != 0 {
		t.Errorf("stats %+v: jobs allowed on Redis error under policy defer", st)
	}
}

// checkAdmissionRate fails if some window of the sorted admission times
// holds more than burst + rate × its length + slack admissions.
func checkAdmissionRate(t *testing.T, times []time.Time, rate, burst, slack int) {
	t.Helper()
	for i := range times {
		for j := i; j < len(times); j++ {
			n := j - i + 1
			allowed := float64(burst) + float64(rate)*times[j].Sub(times[i]).Seconds() + float64(slack)
			if float64(n) > allowed {
				t.Errorf("%d admissions within %s from %s: the limit allows %.0f (burst %d, slack %d)",
					n, times[j].Sub(times[i]), times[i].Format("15:04:05.000"), allowed, burst, slack)
				return
			}
		}
	}
}

// TestRedisDownAllowPolicy: with THROTTLER_ON_REDIS_ERROR=allow and Redis
// down, jobs are admitted by policy, and counted as such. A refused
// connection fails at once: the jobs do not wait out the Redis timeout
// (with go-redis's default retries each batch took the whole of it).
func TestRedisDownAllowPolicy(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_ON_REDIS_ERROR": "allow", "THROTTLER_REDIS_TIMEOUT": "10s"})
	e.ensureStream(cfg)
	w := e.startWorker(cfg, nil)
	out := e.collect("done.*")
	e.redis.Stop(t)

	want := e.publishJobs(cfg.Stream, "jobs.acme", nil, 20)
	// Well under THROTTLER_REDIS_TIMEOUT: the policy applies on the refusal.
	checkExactlyOnce(t, "forwarded", out.waitCount(t, len(want), 5*time.Second), want)
	w.waitCompleted(t, "acme", int64(len(want)))
	e.waitSettled(t, cfg, 10*time.Second)
	st := w.stats()["acme"]
	if st.AllowedOnRedisError != int64(len(want)) || st.Completed != int64(len(want)) {
		t.Errorf("stats %+v: want %d allowed on Redis error and completed", st, len(want))
	}
}

// TestLongHandlerOutlivesAckWait: a handler running three times AckWait
// keeps its job with InProgress; the job is neither redelivered nor run
// twice.
func TestLongHandlerOutlivesAckWait(t *testing.T) {
	checkSlowJobsRunOnce(t, map[string]string{"THROTTLER_ACK_WAIT": "1s"}, 3*time.Second)
}

// checkSlowJobsRunOnce publishes three jobs together to a worker set with
// vars whose handler works for work, longer than AckWait, and checks that
// each ran once, on its first delivery, that nothing was redelivered, and
// that the worker holds no pulled message at the end.
func checkSlowJobsRunOnce(t *testing.T, vars map[string]string, work time.Duration) {
	t.Helper()
	e := setup(t)
	vars["THROTTLER_DEFAULT_LIMIT"] = "1000/s"
	cfg := e.config(vars)
	e.ensureStream(cfg)
	log := newCallLog()
	forward := consumer.Forwarder(e.js, cfg.Forward)
	w := e.startWorker(cfg, log.wrap(func(ctx context.Context, job consumer.Job) error {
		select {
		case <-time.After(work): // the work itself
		case <-ctx.Done():
			return ctx.Err()
		}
		return forward(ctx, job)
	}))
	out := e.collect("done.*")

	want := e.publishJobs(cfg.Stream, "jobs.acme", nil, 3)
	checkExactlyOnce(t, "forwarded", out.waitCount(t, len(want), 20*time.Second), want)
	e.waitSettled(t, cfg, 10*time.Second)
	for id := range want {
		calls := log.calls(id)
		if len(calls) != 1 || calls[0].delivered != 1 {
			t.Errorf("job %s: calls %+v, want one call at delivery 1", id, calls)
		}
	}
	if info := e.consumerInfo(cfg.Stream, cfg.Consumer); info.NumRedelivered != 0 {
		t.Errorf("consumer redelivered %d messages, want 0", info.NumRedelivered)
	}
	if n := w.held(); n != 0 {
		t.Errorf("the worker still holds %d pulled messages after acting on every job", n)
	}
}

// TestStopHandsBackEveryPulledJob: a worker stopped while jobs keep
// arriving hands back every job it pulled and did not finish, so the next
// worker gets them at once, not after AckWait (30s).
func TestStopHandsBackEveryPulledJob(t *testing.T) {
	countsOnly(t)
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "100000/s"})
	e.ensureStream(cfg)

	want := map[string]bool{}
	var out *collector
	for round := 0; round < 5; round++ {
		stop := e.runWorker(cfg)
		if out == nil {
			out = e.collect("done.*")
		}
		for range 50 {
			want[jobID(cfg.Stream, e.publish("jobs.acme", nil, []byte("x")))] = true
		}
		testenv.Eventually(t, 10*time.Second, "the worker to forward", func() bool { return len(out.all()) >= len(want)-10 })
		// Keep publishing while the worker stops, so that a pull is
		// outstanding when it does.
		stopped := make(chan error, 1)
		go func() { stopped <- stop() }()
		for running := true; running; {
			select {
			case err := <-stopped:
				must(t, err, "worker")
				running = false
			default:
				want[jobID(cfg.Stream, e.publish("jobs.acme", nil, []byte("x")))] = true
			}
		}
	}
	e.startWorker(cfg, nil)
	// Within half the AckWait (30s): a job not handed back would wait it out.
	out.waitCount(t, len(want), 15*time.Second)
	e.waitSettled(t, cfg, 10*time.Second)
	checkExactlyOnce(t, "forwarded", out.waitAll(t, 10*time.Second), want)
}

// runWorker runs a forwarding worker with cfg until the returned stop is
// called (which waits for its shutdown) or the test ends.
func (e *env) runWorker(cfg *app.Settings) (stop func() error) {
	e.t.Helper()
	nc := e.connect()
	rdb := e.redis.Client(e.t)
	ctx, cancel := context.WithCancel(context.Background())
	var err error
	done := make(chan struct{}) // closed once err is set
	log := slog.New(slog.NewTextHandler(logSink(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	go func() {
		defer close(done)
		err = app.Run(ctx, cfg, app.Options{NATS: nc, Redis: rdb, Logger: log})
	}()
	stop = func() error {
		cancel()
		select {
		case <-done:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("worker did not stop within 30s")
		}
	}
	e.t.Cleanup(func() { _ = stop() })
	return stop
}

// TestJobsWaitingForAHandlerSlotOutliveAckWait: admitted jobs waiting for a
// handler slot (every slot busy with a long job) are kept alive like running
// jobs, so JetStream does not redeliver them after AckWait: each runs once,
// on its first delivery, and is charged once. With one slot and jobs of
// 1.5 s, published together, the second waits 1.5 s and the third 3 s.
func TestJobsWaitingForAHandlerSlotOutliveAckWait(t *testing.T) {
	checkSlowJobsRunOnce(t, map[string]string{"THROTTLER_ACK_WAIT": "1s", "THROTTLER_CONCURRENCY": "1"}, 1500*time.Millisecond)
}

// TestFailingTenantDoesNotStarveOthers: a tenant whose every job fails must
// not fill MaxAckPending with jobs waiting for their retry. Its retries are
// deferred like throttled jobs (past its share, moved off the consumer), so
// another tenant's jobs keep running promptly, and every failing job is
// still dead-lettered once, none lost. Before, when retries were always
// NAK'd, with MaxAckPending 100 and 300 failing jobs the other tenant's
// jobs waited up to 7.8 s here (and with five failures allowed, not one of
// them ran in 22 s).
func TestFailingTenantDoesNotStarveOthers(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "1000/s", "THROTTLER_MAX_ACK_PENDING": "100",
		"THROTTLER_MAX_FAILURES": "3", "THROTTLER_DEFER": "auto"})
	e.ensureStream(cfg)
	forward := consumer.Forwarder(e.js, cfg.Forward)
	var mu sync.Mutex
	var goodDelays []time.Duration
	e.startWorker(cfg, func(ctx context.Context, job consumer.Job) error {
		if job.Tenant == "bad" {
			return errors.New("downstream down")
		}
		sent, err := time.Parse(time.RFC3339Nano, job.Header.Get("Sent"))
		if err != nil {
			return fmt.Errorf("no Sent header: %w", err)
		}
		mu.Lock()
		goodDelays = append(goodDelays, time.Since(sent))
		mu.Unlock()
		return forward(ctx, job)
	})
	out := e.collect("done.*")
	dlq := e.collect("dlq.*")

	const nBad, nGood = 300, 20
	bad := e.publishJobs(cfg.Stream, "jobs.bad", nil, nBad)
	good := map[string]bool{}
	for range nGood {
		hdr := nats.Header{"Sent": {time.Now().Format(time.RFC3339Nano)}}
		good[jobID(cfg.Stream, e.publish("jobs.good", hdr, []byte("x")))] = true
		time.Sleep(100 * time.Millisecond) // publishing pace: 10 jobs a second
	}
	checkExactlyOnce(t, "forwarded", out.waitCount(t, nGood, 10*time.Second), good)
	mu.Lock()
	longest := time.Duration(0)
	for i, d := range goodDelays {
		longest = max(longest, d)
		if d > 2*time.Second {
			t.Errorf("good job %d waited %s behind the failing tenant's retries", i, d)
		}
	}
	mu.Unlock()
	t.Logf("the good tenant's longest wait: %s", longest)
	checkExactlyOnce(t, "dead-lettered", dlq.waitCount(t, nBad, 30*time.Second), bad)
}

// TestMovedRetryOfAnOwnerRuns: a moved job's copy that runs records itself
// as the job's owner; if its handler fails, the retry is moved too, and its
// copy must run, not be taken for a duplicate of the failed one and acked
// unrun (the failure gives the owner record up).
func TestMovedRetryOfAnOwnerRuns(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_TENANT_LIMITS": "slow=5/s:1", "THROTTLER_DEFER": "schedule"})
	e.ensureStream(cfg)
	forward := consumer.Forwarder(e.js, cfg.Forward)
	log := newCallLog()
	var failed sync.Map
	w := e.startWorker(cfg, log.wrap(func(ctx context.Context, job consumer.Job) error {
		// Fail each moved job's first run: it runs as a copy, the owner.
		if job.Deferrals > 0 {
			if _, again := failed.LoadOrStore(job.ID, true); !again {
				return errors.New("first run fails")
			}
		}
		return forward(ctx, job)
	}))
	out := e.collect("done.*")
	const n = 4
	want := e.publishJobs(cfg.Stream, "jobs.slow", nil, n)
	checkExactlyOnce(t, "forwarded", out.waitCount(t, n, 20*time.Second), want)
	e.waitSettled(t, cfg, 10*time.Second)
	moved := 0
	for id := range want {
		if _, ok := failed.Load(id); ok {
			moved++
			if calls := len(log.calls(id)); calls != 2 {
				t.Errorf("%s: handler called %d times, want 2 (a failure, then the retry)", id, calls)
			}
		}
	}
	if moved == 0 {
		t.Fatalf("no job ran as a moved copy")
	}
	if st := w.stats()["slow"]; st.Duplicates != 0 {
		t.Errorf("%d copies taken for duplicates", st.Duplicates)
	}
}

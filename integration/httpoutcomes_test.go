package integration

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/throttler/throttler/header"
)

// fleetSize is how many worker processes the fleet tests run.
const fleetSize = 3

// TestHTTPFleetRetryAfterHoldsTenant: three worker processes send acme's
// and globex's jobs, published at 25 a second each, to a downstream that
// answers one acme request 429 with Retry-After: 2 once acme's jobs have
// flowed for a second. From that answer no acme request reaches the
// downstream from any worker for 2 s, while globex's keep coming; then
// acme resumes and every job is answered 2xx. The 429 is one hold, not a
// failure.
//
// Jobs published at a steady pace under the tenant's limit are admitted as
// they arrive and sent at once, so every acme request in the window was
// decided under the hold, but for those decided in the moment between the
// 429's answer and the hold reaching Redis: requests arriving in the
// first holdGrace are let be. TestHTTPFleetRetryAfterHoldsBacklog has
// jobs admitted before the hold.
func TestHTTPFleetRetryAfterHoldsTenant(t *testing.T) {
	const rate = 25 // jobs a second, each tenant
	const publish = 5 * time.Second
	f := startHTTPFleet(t, downstreamOptions{Answer: answer429Once("acme")}, map[string]string{"THROTTLER_HTTP_TIMEOUT": "5s"})
	f.start(fleetSize)

	ids := f.publishPaced(map[string]int{"acme": rate, "globex": rate}, publish).wait(t)
	f.waitAnsweredOK(append(slices.Clone(ids["acme"]), ids["globex"]...), 30*time.Second)

	w := checkHoldWindow(t, f.ds.calls(), "acme", holdGrace, holdFor-clockSlack)
	globex := f.ds.requestsIn("globex", w.at, w.at.Add(holdFor))
	t.Logf("%s; globex: %d requests during the hold", w, globex)
	before, after := w.before, w.after
	// Every worker was sending acme's jobs before and after: the hold
	// stopped the fleet, not the worker that heard the 429.
	for i := range fleetSize {
		w := strconv.Itoa(i)
		if before[w] == 0 || after[w] == 0 {
			t.Errorf("worker %s sent %d of acme's jobs before the 429 and %d after the hold, want some of each", w, before[w], after[w])
		}
	}
	// Another tenant is not held: globex keeps its pace (25 a second).
	if most := rate * int(holdFor/time.Second); globex < most*3/4 {
		t.Errorf("globex: %d requests during acme's hold, want at least %d of its %d", globex, most*3/4, most)
	}
	if holds, failed := f.tenantMetric("throttler_downstream_holds_total", "acme"), f.tenantMetric("throttler_failed_total", "acme"); holds != 1 || failed != 0 {
		t.Errorf("acme: %v downstream holds and %v failures, want 1 and 0", holds, failed)
	}
}

// TestHTTPFleetRetryAfterHoldsBacklog is TestHTTPFleetRetryAfterHoldsTenant
// with a backlog: acme's 150 jobs are published before the workers start,
// at a limit of 20/s:5, and each worker runs 2 handlers at once, so when
// the 429 comes some of acme's jobs are admitted and waiting for a handler
// slot, and others hold slots reserved before the hold. None of them
// reaches the downstream during the hold either: the worker that hears the
// 429 tells the others, and each checks just before it starts a job.
func TestHTTPFleetRetryAfterHoldsBacklog(t *testing.T) {
	const jobs = 150
	f := startHTTPFleet(t, downstreamOptions{Answer: answer429Once("acme")}, map[string]string{"THROTTLER_HTTP_TIMEOUT": "5s",
		"THROTTLER_CONCURRENCY": "2", "THROTTLER_TENANT_LIMITS": "acme=20/s:5"})
	f.e.ensureStream(f.cfg)
	ids := f.publish("acme", jobs)
	f.start(fleetSize)
	f.waitAnsweredOK(ids, 60*time.Second)

	w := checkHoldWindow(t, f.ds.calls(), "acme", holdGrace, holdFor-clockSlack)
	t.Logf("%s; %v jobs held back after their admission", w, f.tenantMetric("throttler_held_back_total", "acme"))
	// The job answered 429 is sent again after the hold; no other twice.
	dups := f.ds.duplicates()
	if dups[w.held.Key] != 2 {
		t.Errorf("the job answered 429 was sent %d times, want 2", dups[w.held.Key])
	}
	delete(dups, w.held.Key)
	if len(dups) != 0 {
		t.Errorf("keys sent more than once: %v", dups)
	}
}

// The timing of the hold tests: the downstream answers 429 with
// Retry-After: 2 (holdFor); requests arriving in the first holdGrace after
// it may have been decided in the moment before the hold reached Redis and
// the workers; the hold ends by a worker's reading of the 429 plus
// Retry-After, and the 429's end is recorded just before that
// (clockSlack).
const (
	holdFor    = 2 * time.Second
	holdGrace  = 250 * time.Millisecond
	clockSlack = 100 * time.Millisecond
)

// answer429Once answers tenant's first request that arrives a second or
// more after its first one 429 with Retry-After: 2, once.
func answer429Once(tenant string) func(call) (reply, bool) {
	var (
		mu       sync.Mutex
		first    time.Time
		answered bool
	)
	return func(c call) (reply, bool) {
		if c.Tenant != tenant {
			return reply{}, false
		}
		mu.Lock()
		defer mu.Unlock()
		if first.IsZero() {
			first = c.Arrived
		}
		if !answered && c.Arrived.Sub(first) >= time.Second {
			answered = true
			return reply{Status: 429, RetryAfter: strconv.Itoa(int(holdFor / time.Second))}, true
		}
		return reply{}, false
	}
}

// holdWindow is how a tenant's requests fell around the one 429 it got.
type holdWindow struct {
	held            call
	at              time.Time      // when the 429 was answered
	before, after   map[string]int // requests per worker
	inGrace, inHold int
}

func (w holdWindow) String() string {
	return fmt.Sprintf("429 to worker %s; requests per worker before it %v, in the grace after it %d, during the hold %d, after it %v",
		w.held.Worker, w.before, w.inGrace, w.inHold, w.after)
}

// checkHoldWindow finds the one 429 among calls and fails t for every
// request of tenant that arrived from grace to holdEnd after it.
func checkHoldWindow(t *testing.T, calls []call, tenant string, grace, holdEnd time.Duration) holdWindow {
	t.Helper()
	w := holdWindow{before: map[string]int{}, after: map[string]int{}}
	for _, c := range calls {
		if c.Status == 429 {
			if !w.held.Arrived.IsZero() {
				t.Fatalf("two 429s: %+v and %+v", w.held, c)
			}
			w.held = c
		}
	}
	if w.held.Arrived.IsZero() {
		t.Fatalf("the downstream never answered 429 (%d requests)", len(calls))
	}
	w.at = w.held.Ended
	for _, c := range calls {
		if c.Tenant != tenant || c.Key == w.held.Key && c.Attempt == w.held.Attempt {
			continue
		}
		since := c.Arrived.Sub(w.at)
		switch {
		case since < 0:
			w.before[c.Worker]++
		case since < grace:
			w.inGrace++
		case since < holdEnd:
			w.inHold++
			t.Errorf("%s's job %s reached the downstream from worker %s %s after the 429, within the hold",
				tenant, c.Key, c.Worker, since.Round(time.Millisecond))
		default:
			w.after[c.Worker]++
		}
	}
	return w
}

// TestHTTPFleetFailures: three worker processes (THROTTLER_MAX_FAILURES=3,
// THROTTLER_HTTP_TIMEOUT=500ms) send three jobs of each of three tenants to
// a downstream that answers gone's 404, broken's 500, and never answers
// stuck's. Each outcome is checked, per job, in the downstream's ledger and
// on the dead-letter subject.
func TestHTTPFleetFailures(t *testing.T) {
	countsOnly(t)
	const (
		maxFailures = 3
		timeout     = 500 * time.Millisecond
		jobs        = 3
	)
	f := startHTTPFleet(t, downstreamOptions{Answer: func(c call) (reply, bool) {
		switch c.Tenant {
		case "gone":
			return reply{Status: 404, Body: "no such account"}, true
		case "broken":
			return reply{Status: 500, Body: "database on fire"}, true
		case "stuck":
			return reply{Hang: true}, true
		}
		return reply{}, false
	}}, map[string]string{
		"THROTTLER_MAX_FAILURES": strconv.Itoa(maxFailures),
		"THROTTLER_HTTP_TIMEOUT": timeout.String(),
	})
	f.start(fleetSize)
	dlq := f.e.collect("dlq.*")
	ids := map[string][]string{}
	for _, tenant := range []string{"gone", "broken", "stuck"} {
		ids[tenant] = f.publish(tenant, jobs)
	}
	dlq.waitCount(t, 3*jobs, 30*time.Second)
	f.waitSettled(30 * time.Second)
	letters := map[string]collected{}
	for _, m := range dlq.waitAll(t, 10*time.Second) {
		if _, twice := letters[m.jobID]; twice {
			t.Errorf("job %s dead-lettered twice", m.jobID)
		}
		letters[m.jobID] = m
	}
	byKey := map[string][]call{}
	for _, c := range f.ds.calls() {
		byKey[c.Key] = append(byKey[c.Key], c)
	}

	// A 404 is the endpoint refusing the job as it is: dead-lettered at
	// once, with the status and the answer in the reason, never retried.
	t.Run("404DeadLettersAtOnce", func(t *testing.T) {
		for _, id := range ids["gone"] {
			cs, dl := byKey[id], letters[id]
			if len(cs) != 1 {
				t.Errorf("job %s sent %d times, want once", id, len(cs))
				continue
			}
			if dl.jobID == "" {
				t.Errorf("job %s not dead-lettered", id)
				continue
			}
			if !strings.Contains(dl.reason, "HTTP 404") || !strings.Contains(dl.reason, "no such account") {
				t.Errorf("job %s: reason %q, want the status and the answer", id, dl.reason)
			}
			if dl.subject != "dlq.gone" {
				t.Errorf("job %s dead-lettered on %s, want dlq.gone", id, dl.subject)
			}
			// The first retry would come a backoff (1 s) after the answer.
			if wait := dl.at.Sub(cs[0].Ended); wait > time.Second {
				t.Errorf("job %s dead-lettered %s after its 404, want at once", id, wait)
			}
		}
		if n := f.tenantMetric("throttler_dead_lettered_total", "gone"); n != jobs {
			t.Errorf("gone: %v dead-lettered, want %d", n, jobs)
		}
	})

	// A 500 is a failure: retried with backoff, dead-lettered after the
	// last allowed failure, so the endpoint sees each job exactly
	// THROTTLER_MAX_FAILURES times.
	t.Run("500RetriedThenDeadLettered", func(t *testing.T) {
		for _, id := range ids["broken"] {
			checkFailedAttempts(t, id, byKey[id], letters[id], maxFailures, "HTTP 500")
		}
		if n := f.tenantMetric("throttler_failed_total", "broken"); n != maxFailures*jobs {
			t.Errorf("broken: %v failures counted, want %d", n, maxFailures*jobs)
		}
	})

	// An endpoint that never answers: the worker gives up after
	// THROTTLER_HTTP_TIMEOUT, which is a failure like a 500.
	t.Run("HangingServerTimesOut", func(t *testing.T) {
		for _, id := range ids["stuck"] {
			cs := byKey[id]
			checkFailedAttempts(t, id, cs, letters[id], maxFailures, "no answer within "+timeout.String())
			for _, c := range cs {
				// The client gave up after the timeout: the downstream saw
				// the request end then, not when the test closed it.
				if took := c.Ended.Sub(c.Arrived); took < timeout*6/10 || took > 4*timeout {
					t.Errorf("job %s: attempt %d held the downstream %s, want the worker to give up after about %s", id, c.Attempt, took, timeout)
				}
			}
		}
	})
}

// checkFailedAttempts checks a job whose every attempt failed: sent exactly
// maxFailures times, each retry a backoff after the previous answer, then
// dead-lettered with its failures and a reason holding want.
func checkFailedAttempts(t *testing.T, id string, cs []call, dl collected, maxFailures int, want string) {
	t.Helper()
	if len(cs) != maxFailures {
		t.Errorf("job %s sent %d times, want %d (THROTTLER_MAX_FAILURES)", id, len(cs), maxFailures)
	}
	for i := 1; i < len(cs); i++ {
		// The first backoff is 1 s, ±20 %.
		if gap := cs[i].Arrived.Sub(cs[i-1].Ended); gap < 700*time.Millisecond {
			t.Errorf("job %s: attempt %d came %s after the previous one ended, want a backoff", id, i+1, gap)
		}
	}
	if dl.jobID == "" {
		t.Errorf("job %s not dead-lettered", id)
		return
	}
	if !strings.Contains(dl.reason, want) {
		t.Errorf("job %s: reason %q, want it to hold %q", id, dl.reason, want)
	}
	if got := dl.header.Get(header.Failures); got != strconv.Itoa(maxFailures) {
		t.Errorf("job %s: %s %q, want %d", id, header.Failures, got, maxFailures)
	}
	// An attempt the worker gave up on (a timeout) ends at the endpoint
	// when it notices the closed connection, which may come a moment
	// after the worker dead-lettered the job: hence the margin.
	if len(cs) > 0 && dl.at.Before(cs[len(cs)-1].Ended.Add(-200*time.Millisecond)) {
		t.Errorf("job %s dead-lettered before its last attempt ended", id)
	}
}

// TestHTTPFleetLedgerLosesNothing: three worker processes run a mixed
// workload through the http handler: a flood over its limit (deferred with
// NAKs and moves, so some jobs travel as copies), a tenant slow enough
// that its jobs wait past THROTTLER_SCHEDULE_AFTER, and a quiet tenant
// published behind the flood (the fast lane may copy its jobs). Every job
// reaches the downstream with a 2xx, and none is sent twice: the same
// Idempotency-Key never arrives again outside a crash.
func TestHTTPFleetLedgerLosesNothing(t *testing.T) {
	countsOnly(t)
	f := startHTTPFleet(t, downstreamOptions{Took: map[string]time.Duration{"slow": 100 * time.Millisecond, "quiet": 50 * time.Millisecond}},
		map[string]string{"THROTTLER_TENANT_LIMITS": "flood=150/s,slow=10/s:5"})
	f.start(fleetSize)
	var ids []string
	ids = append(ids, f.publish("flood", 900)...)
	ids = append(ids, f.publish("slow", 60)...)
	quiet := f.publishPaced(map[string]int{"quiet": 20}, 2*time.Second).wait(t)
	ids = append(ids, quiet["quiet"]...)
	f.waitAnsweredOK(ids, 60*time.Second)
	// Nothing more can reach the downstream once the jobs settled.
	f.waitSettled(30 * time.Second)

	calls := f.ds.calls()
	published := map[string]bool{}
	for _, id := range ids {
		published[id] = true
	}
	for _, c := range calls {
		if !published[c.Key] {
			t.Errorf("request for job %s, never published", c.Key)
		}
		if c.Status != 200 {
			t.Errorf("job %s answered %d; the downstream answers 200 to all", c.Key, c.Status)
		}
	}
	dups := f.ds.duplicates()
	var moved, laned float64
	for _, tenant := range []string{"flood", "slow", "quiet"} {
		moved += f.tenantMetric("throttler_moved_total", tenant)
		laned += f.tenantMetric("throttler_fast_laned_total", tenant)
	}
	t.Logf("%d jobs, %d requests, %d keys sent more than once; %v deferrals moved, %v jobs fast-laned",
		len(ids), len(calls), len(dups), moved, laned)
	if len(dups) != 0 {
		t.Errorf("keys sent more than once: %v", dups)
	}
	if moved == 0 {
		t.Errorf("no job was moved: the workload did not exercise copies")
	}
}

package consumer

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttler/throttler/fastlane/fastcopy"
	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

func TestTenantsInTurn(t *testing.T) {
	cases := []struct {
		in, want string // jobs as tenant+number, space-separated
	}{
		{"", ""},
		{"a1", "a1"},
		{"a1 a2 a3", "a1 a2 a3"},
		// A flood's group with one job of another tenant at its end: that
		// job starts second, not last.
		{"a1 a2 a3 a4 b1", "a1 b1 a2 a3 a4"},
		{"a1 a2 b1 c1 b2 a3 c2", "a1 b1 c1 a2 b2 c2 a3"},
		{"b1 a1 a2 a3 b2", "b1 a1 a2 b2 a3"},
	}
	for _, c := range cases {
		var jobs []*item
		for _, f := range strings.Fields(c.in) {
			jobs = append(jobs, &item{job: Job{Tenant: f[:1], ID: f}})
		}
		var got []string
		for _, it := range tenantsInTurn(jobs) {
			got = append(got, it.job.ID)
		}
		if g := strings.Join(got, " "); g != c.want {
			t.Errorf("tenantsInTurn(%q) = %q, want %q", c.in, g, c.want)
		}
	}
}

// TestAdmittedJobRunsAndIsAcked: an admitted job runs through the handler,
// which sees the job read from the message, and is acked when it succeeds.
func TestAdmittedJobRunsAndIsAcked(t *testing.T) {
	e := setup(t)
	e.start()
	m := newMsg(1, "jobs.acme.mail", "Job-Cost", "3")
	e.push(m)
	e.waitSettled(m)
	e.stop()

	wantSettled(t, m, ack)
	jobs := e.ran.all()
	if len(jobs) != 1 {
		t.Fatalf("handler ran %d jobs, want 1", len(jobs))
	}
	job := jobs[0]
	if job.Tenant != "acme" || job.Cost != 3 || job.Subject != "jobs.acme.mail" || job.ID != "JOBS:1" || string(job.Data) != "job 1" ||
		job.Stream != testStream || job.Sequence != 1 || job.Delivered != 1 || !job.Published.Equal(stored) {
		t.Errorf("handler got %+v", job)
	}
	if s := e.stats("acme"); s.Delivered != 1 || s.Admitted != 1 || s.Completed != 1 || s.RedisCalls != 1 {
		t.Errorf("stats %+v, want one delivered, admitted and completed", s)
	}
}

// TestDecisionNamesTheIncarnation: the worker asks the throttle about each
// job as the incarnation it is; only the first delivery of an original is
// fresh; every copy has the order of the original's first delivery.
func TestDecisionNamesTheIncarnation(t *testing.T) {
	tests := []struct {
		name string
		msg  *fakeMsg
		want throttle.Copy
	}{
		{name: "first delivery of an original", msg: newMsg(7, "jobs.acme", "Job-Cost", "2"),
			want: throttle.Copy{Request: throttle.Request{Tenant: "acme", JobID: "JOBS:7", Cost: 2}, Fresh: true, Order: 7}},
		{name: "original delivered again", msg: newMsg(7, "jobs.acme").redelivered(),
			want: throttle.Copy{Request: throttle.Request{Tenant: "acme", JobID: "JOBS:7", Cost: 1}, Incarnation: 7, Order: 7}},
		{name: "moved copy", msg: newMsg(40, "jobs.acme", header.JobID, "JOBS:7", header.Deferrals, "1"),
			want: throttle.Copy{Request: throttle.Request{Tenant: "acme", JobID: "JOBS:7", Cost: 1}, Incarnation: 40, Order: 7}},
		{name: "fast copy", msg: newMsg(41, "jobs.acme", header.JobID, "JOBS:7", fastcopy.Header, fastcopy.Reserved),
			want: throttle.Copy{Request: throttle.Request{Tenant: "acme", JobID: "JOBS:7", Cost: 1}, Incarnation: fastcopy.Incarnation(7), Order: 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := setup(t)
			e.start()
			e.push(tt.msg)
			e.waitSettled(tt.msg)
			e.stop()
			if got := e.decider.asked(); !reflect.DeepEqual(got, []throttle.Copy{tt.want}) {
				t.Errorf("decider asked %+v, want %+v", got, tt.want)
			}
			wantSettled(t, tt.msg, ack)
		})
	}
}

// TestLimitedJobIsNakedWithTheEnginesWait: a job that must wait is handed
// to the Deferrer (NakDeferrer by default), which NAKs it for the engine's
// wait and one millisecond more (nakDelay); it does not run.
func TestLimitedJobIsNakedWithTheEnginesWait(t *testing.T) {
	for _, o := range []throttle.Outcome{throttle.Reserved, throttle.Limited} {
		t.Run(o.String(), func(t *testing.T) {
			const wait = 250*time.Millisecond + 7*time.Microsecond
			e := setup(t)
			e.decider.decide = func(context.Context, throttle.Copy) throttle.Result { return result(o, wait) }
			e.start()
			m := newMsg(1, "jobs.acme")
			e.push(m)
			e.waitSettled(m)
			e.stop()

			wantSettled(t, m, nakAfter(wait+time.Millisecond))
			if got := e.ran.ids(); len(got) != 0 {
				t.Errorf("handler ran %v, want none", got)
			}
			if s := e.stats("acme"); s.Deferred != 1 || s.Admitted != 0 || s.Moved != 0 {
				t.Errorf("stats %+v, want one deferred, none admitted or moved", s)
			}
		})
	}
}

// TestShadowedJobRunsAndIsCounted: a job of a tenant in shadow mode that
// enforcing would have held runs at once, and the worker counts the wait
// it was spared.
func TestShadowedJobRunsAndIsCounted(t *testing.T) {
	e := setup(t)
	e.decider.decide = func(context.Context, throttle.Copy) throttle.Result {
		return throttle.Result{Decision: throttle.Decision{Outcome: throttle.Admitted, Shadow: true, ShadowWait: 1500 * time.Millisecond}}
	}
	e.start()
	m := newMsg(1, "jobs.acme")
	e.push(m)
	e.waitSettled(m)
	e.stop()

	wantSettled(t, m, ack)
	if got := e.ran.ids(); len(got) != 1 {
		t.Errorf("handler ran %v, want the job", got)
	}
	if s := e.stats("acme"); s.Admitted != 1 || s.Deferred != 0 || s.ShadowLimited != 1 || s.ShadowWait != 1500*time.Millisecond {
		t.Errorf("stats %+v, want one admitted, none deferred, one shadow-limited for 1.5s", s)
	}
}

// TestLimitedJobSaysWhichLimitHeldIt: the deferral of a limited job names
// the limit that held it, for the moved copy's header.WaitReason.
func TestLimitedJobSaysWhichLimitHeldIt(t *testing.T) {
	e := setup(t)
	e.decider.decide = func(context.Context, throttle.Copy) throttle.Result {
		return throttle.Result{Decision: throttle.Decision{Outcome: throttle.Reserved, Wait: time.Second, Binding: throttle.PerMinute(20, 5)}}
	}
	d := &fakeDeferrer{}
	e.params.Deferrer = d
	e.start()
	m := newMsg(1, "jobs.acme")
	e.push(m)
	e.waitSettled(m)
	e.stop()
	if got := d.deferred(); len(got) != 1 || got[0].Reason != "limit 20/m:5" {
		t.Fatalf("deferrals %+v, want one held by limit 20/m:5", got)
	}
}

// TestDuplicateIsAckedWithoutRunning: another incarnation of the job ran.
func TestDuplicateIsAckedWithoutRunning(t *testing.T) {
	e := setup(t)
	e.decider.decide = func(context.Context, throttle.Copy) throttle.Result {
		return throttle.Result{Decision: throttle.Decision{Outcome: throttle.Duplicate, Owner: 40}}
	}
	e.start()
	m := newMsg(41, "jobs.acme", header.JobID, "JOBS:7", header.Deferrals, "2")
	e.push(m)
	e.waitSettled(m)
	e.stop()

	wantSettled(t, m, ack)
	if got := e.ran.ids(); len(got) != 0 {
		t.Errorf("handler ran %v, want none", got)
	}
	if s := e.stats("acme"); s.Duplicates != 1 || s.Admitted != 0 {
		t.Errorf("stats %+v, want one duplicate, none admitted", s)
	}
}

// claimedByLane decides every job a Duplicate whose owner is the lane's copy.
func claimedByLane(_ context.Context, c throttle.Copy) throttle.Result {
	seq, _ := strconv.ParseUint(strings.TrimPrefix(c.JobID, testStream+":"), 10, 64)
	return throttle.Result{Decision: throttle.Decision{Outcome: throttle.Duplicate, Owner: fastcopy.Incarnation(seq)}}
}

// TestClaimedDuplicateGoesToTheClaimSettler: an original whose job a lane
// claimed for its fast copy is the ClaimSettler's to settle, not the
// worker's.
func TestClaimedDuplicateGoesToTheClaimSettler(t *testing.T) {
	e := setup(t)
	claims := &fakeClaims{}
	e.params.Claims = claims
	e.decider.decide = claimedByLane
	e.start()
	m := newMsg(3, "jobs.acme")
	e.push(m)
	testenv.Eventually(t, waitFor, "the claim settler given the job", func() bool { return len(claims.given()) > 0 })
	e.stop()

	if got := claims.given(); len(got) != 1 || got[0].ID != "JOBS:3" || got[0].Tenant != "acme" {
		t.Errorf("claim settler given %+v, want job JOBS:3 of acme", got)
	}
	wantSettled(t, m) // the fake settler settles nothing; neither may the worker
	if got := e.ran.ids(); len(got) != 0 {
		t.Errorf("handler ran %v, want none", got)
	}
}

// TestClaimedDuplicateWithoutClaimSettlerIsNakedForRecheck: without a
// ClaimSettler, the original comes back after claimRecheck to be decided
// again, until the claim is settled or expires.
func TestClaimedDuplicateWithoutClaimSettlerIsNakedForRecheck(t *testing.T) {
	e := setup(t)
	e.decider.decide = claimedByLane
	e.start()
	m := newMsg(3, "jobs.acme")
	e.push(m)
	e.waitSettled(m)
	e.stop()

	wantSettled(t, m, nakAfter(claimRecheck))
	if got := e.ran.ids(); len(got) != 0 {
		t.Errorf("handler ran %v, want none", got)
	}
}

// TestRedisDownDeferNaksWithBackoffAndRunsNothing: under DeferOnRedisError
// a job Redis failed to decide is NAK'd for the worker's Redis backoff
// (100 ms, growing 1.5 times a failure, ±50%), never run; once Redis
// answers, jobs run again and the backoff starts over.
func TestRedisDownDeferNaksWithBackoffAndRunsNothing(t *testing.T) {
	e := setup(t)
	var down atomic.Bool
	down.Store(true)
	e.decider.decide = func(context.Context, throttle.Copy) throttle.Result {
		if down.Load() {
			return redisFailure(errors.New("connection refused"))
		}
		return result(throttle.Admitted, 0)
	}
	e.start()
	deliver := func(seq uint64) *fakeMsg {
		m := newMsg(seq, "jobs.acme")
		e.push(m)
		e.waitSettled(m)
		return m
	}
	first, second := deliver(1), deliver(2)
	down.Store(false)
	up := deliver(3)
	down.Store(true)
	again := deliver(4)
	e.stop()

	wantNakWithin(t, first, 50*time.Millisecond, 150*time.Millisecond)
	wantNakWithin(t, second, 75*time.Millisecond, 225*time.Millisecond)
	wantSettled(t, up, ack)
	wantNakWithin(t, again, 50*time.Millisecond, 150*time.Millisecond)
	if got := e.ran.ids(); !slices.Equal(got, []string{"JOBS:3"}) {
		t.Errorf("handler ran %v, want only JOBS:3, decided while Redis answered", got)
	}
	if s := e.stats("acme"); s.RedisErrors != 3 || s.AllowedOnRedisError != 0 || s.Admitted != 1 {
		t.Errorf("stats %+v, want 3 Redis errors, none allowed, 1 admitted", s)
	}
}

// TestRedisDownAllowRunsAndCounts: under AllowOnRedisError a job Redis
// failed to decide runs, and is counted as allowed on a Redis error.
func TestRedisDownAllowRunsAndCounts(t *testing.T) {
	e := setup(t)
	e.params.Config.OnRedisError = AllowOnRedisError
	e.decider.decide = func(context.Context, throttle.Copy) throttle.Result {
		return redisFailure(errors.New("i/o timeout"))
	}
	e.start()
	msgs := []*fakeMsg{newMsg(1, "jobs.acme"), newMsg(2, "jobs.globex"), newMsg(3, "jobs.acme")}
	e.push(msgs...)
	e.waitSettled(msgs...)
	e.stop()

	for _, m := range msgs {
		wantSettled(t, m, ack)
	}
	if got := e.ran.ids(); len(got) != 3 {
		t.Errorf("handler ran %v, want all 3 jobs", got)
	}
	for tenant, n := range map[string]int64{"acme": 2, "globex": 1} {
		if s := e.stats(tenant); s.AllowedOnRedisError != n || s.RedisErrors != n || s.Admitted != n || s.Completed != n {
			t.Errorf("%s: stats %+v, want %d allowed on Redis error, admitted and completed", tenant, s, n)
		}
	}
}

// TestAdmittedGroupStartsTenantsInTurn: the admitted jobs of one decided
// group start with the tenants taking turns (tenantsInTurn), not in
// delivery order: one handler slot, and b's job starts second.
func TestAdmittedGroupStartsTenantsInTurn(t *testing.T) {
	e := setup(t)
	e.params.Config.Concurrency = 1
	deciding, gateReached := newSignal(t)
	release, open := newSignal(t)
	e.decider.decide = func(_ context.Context, c throttle.Copy) throttle.Result {
		if c.JobID == "JOBS:1" {
			// Hold the first group until the next is waiting whole, so that
			// it is decided as one group.
			gateReached()
			<-release
		}
		return result(throttle.Admitted, 0)
	}
	e.start()
	gate := newMsg(1, "jobs.z")
	e.push(gate)
	await(t, deciding, "the first group's decision")
	group := []*fakeMsg{newMsg(2, "jobs.a"), newMsg(3, "jobs.a"), newMsg(4, "jobs.a"), newMsg(5, "jobs.b")}
	e.waitTaken(e.push(group...))
	open()
	e.waitSettled(append(group, gate)...)
	e.stop()

	if got, want := e.ran.ids(), []string{"JOBS:1", "JOBS:2", "JOBS:5", "JOBS:3", "JOBS:4"}; !slices.Equal(got, want) {
		t.Errorf("handlers started %v, want %v", got, want)
	}
}

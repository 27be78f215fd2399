package throttle_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// tick is the period of the limits these tests change: a minute, so that
// no bucket expires while a slow machine runs them (the tests pass fixed
// times, but Redis expires a bucket by its own clock once it would be full).
// The tests read as if the period were a second: "20/s" is per(20, …), and
// "50 ms" is in(50 * ms).
const tick = time.Minute

// per is a limit of rate per tick with burst.
func per(rate, burst int64) throttle.Limit {
	return throttle.Limit{Rate: rate, Period: tick, Burst: burst}
}

// in scales d, a time under limits per second, to limits per tick.
func in(d time.Duration) time.Duration { return d * (tick / time.Second) }

// livePolicies is a Policies whose policies a test changes while the
// limiter runs, as a store of live limits does.
type livePolicies struct {
	mu  sync.Mutex
	def throttle.Policy
}

func (p *livePolicies) Policy(string) throttle.Policy {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.def
}

// set makes pol every tenant's policy.
func (p *livePolicies) set(pol throttle.Policy) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.def = pol
}

// newLiveLimiter returns a limiter whose policy starts as pol, and the
// policies to change it with.
func newLiveLimiter(t *testing.T, e env, horizon time.Duration, pol throttle.Policy) (*throttle.Limiter, *livePolicies) {
	t.Helper()
	live := &livePolicies{def: pol}
	l, err := throttle.New(e.rdb, throttle.Options{Policies: live, Horizon: horizon, Prefix: e.prefix})
	if err != nil {
		t.Fatalf("throttle.New: %v", err)
	}
	return l, live
}

// reserveN reserves n jobs of tenant at at, named prefix-0 and on, and
// returns their decisions.
func reserveN(t *testing.T, l *throttle.Limiter, tenant, prefix string, n int, at time.Time) []throttle.Decision {
	t.Helper()
	out := make([]throttle.Decision, n)
	for i := range n {
		out[i] = decide(t, l, throttle.Request{Tenant: tenant, JobID: fmt.Sprintf("%s-%d", prefix, i), At: at})
	}
	return out
}

// Lowering a limit right after a burst admits nothing extra: the empty
// bucket stays empty and fills at the new rate, where a fresh bucket of the
// new limit would have admitted its whole burst at once.
func TestLoweredLimitAfterABurstAdmitsNothingExtra(t *testing.T) {
	e := setup(t)
	l, live := newLiveLimiter(t, e, time.Hour, throttle.Enforce(per(100, 100)))
	for i, d := range reserveN(t, l, "acme", "burst", 100, t0) {
		if d.Outcome != throttle.Admitted {
			t.Fatalf("burst job %d: %+v, want admitted", i, d)
		}
	}
	live.set(throttle.Enforce(per(20, 20)))
	// At the same instant, under 20/s: the next token comes in 50 ms.
	sameDecision(t, "first job under 20/s", decide(t, l, throttle.Request{Tenant: "acme", JobID: "after-0", At: t0}),
		throttle.Decision{Outcome: throttle.Reserved, Wait: in(50 * ms)})
	sameDecision(t, "second job under 20/s", decide(t, l, throttle.Request{Tenant: "acme", JobID: "after-1", At: t0}),
		throttle.Decision{Outcome: throttle.Reserved, Wait: in(100 * ms)})
	// A second later the bucket holds what 20/s added since, less the two
	// slots reserved: 20 - 2 = 18 tokens, never the old limit's 100.
	at := t0.Add(in(time.Second))
	admittedNow := 0
	for admittedNow < 30 && decide(t, l, throttle.Request{Tenant: "acme", At: at}).Outcome == throttle.Admitted {
		admittedNow++
	}
	if admittedNow != 18 {
		t.Fatalf("a second after lowering to 20/s: %d admitted at once, want 18", admittedNow)
	}
}

// A bucket in debt when its limit changes is empty at once: its debt was
// the slots reserved under the old limit, and each job holding one is
// decided again under the new limit when it comes back. So a lowered limit
// holds at once, jobs already waiting included.
func TestLoweredLimitDecidesReservedJobsAgain(t *testing.T) {
	e := setup(t)
	l, live := newLiveLimiter(t, e, time.Hour, throttle.Enforce(per(100, 10)))
	ds := reserveN(t, l, "acme", "old", 30, t0)
	// 10 admitted, then slots every 10 ms: the last at 200 ms.
	if last := ds[29]; last.Outcome != throttle.Reserved || last.Wait != in(200*ms) {
		t.Fatalf("30th job under 100/s: %+v, want reserved for 200ms", last)
	}
	live.set(throttle.Enforce(per(10, 10)))
	sameDecision(t, "first job under 10/s", decide(t, l, throttle.Request{Tenant: "acme", JobID: "new-0", At: t0}),
		throttle.Decision{Outcome: throttle.Reserved, Wait: in(100 * ms)})
	// Jobs reserved under the old limit come back at their slots and are
	// charged again, 100 ms apart.
	sameDecision(t, "old-10 back at its slot", decide(t, l, throttle.Request{Tenant: "acme", JobID: "old-10", At: t0.Add(in(10 * ms))}),
		throttle.Decision{Outcome: throttle.Reserved, Wait: in(190 * ms)})
	sameDecision(t, "old-29 back at its slot", decide(t, l, throttle.Request{Tenant: "acme", JobID: "old-29", At: t0.Add(in(200 * ms))}),
		throttle.Decision{Outcome: throttle.Reserved, Wait: in(100 * ms)})
	// A slot reserved under the new limit is kept.
	sameDecision(t, "old-10 back at its new slot", decide(t, l, throttle.Request{Tenant: "acme", JobID: "old-10", At: t0.Add(in(200 * ms))}),
		throttle.Decision{Outcome: throttle.Admitted})
	sameDecision(t, "next under 10/s", decide(t, l, throttle.Request{Tenant: "acme", JobID: "new-1", At: t0.Add(in(200 * ms))}),
		throttle.Decision{Outcome: throttle.Reserved, Wait: in(200 * ms)})
}

// A raised limit frees a tenant in debt at once: new jobs do not queue
// behind the slots reserved under the old limit, and the jobs holding them
// are charged again when they come back.
func TestRaisedLimitDoesNotQueueBehindOldSlots(t *testing.T) {
	e := setup(t)
	l, live := newLiveLimiter(t, e, time.Hour, throttle.Enforce(per(10, 10)))
	ds := reserveN(t, l, "acme", "old", 30, t0)
	if last := ds[29]; last.Outcome != throttle.Reserved || last.Wait != in(2*time.Second) {
		t.Fatalf("30th job under 10/s: %+v, want reserved for 2s", last)
	}
	live.set(throttle.Enforce(per(100, 100)))
	sameDecision(t, "first job under 100/s", decide(t, l, throttle.Request{Tenant: "acme", JobID: "new-0", At: t0}),
		throttle.Decision{Outcome: throttle.Reserved, Wait: in(10 * ms)})
	// At its old slot, 100 ms on, 9 tokens have come at 100/s.
	sameDecision(t, "old-10 back at its slot", decide(t, l, throttle.Request{Tenant: "acme", JobID: "old-10", At: t0.Add(in(100 * ms))}),
		throttle.Decision{Outcome: throttle.Admitted, Remaining: 8})
}

// Raising a limit takes effect at once: the tokens left carry over and the
// bucket fills at the new rate from the change on.
func TestRaisedLimitTakesEffectAtOnce(t *testing.T) {
	e := setup(t)
	l, live := newLiveLimiter(t, e, time.Hour, throttle.Enforce(per(10, 10)))
	reserveN(t, l, "acme", "burst", 10, t0)
	// 100 ms later the old limit has added one token.
	at := t0.Add(in(100 * ms))
	live.set(throttle.Enforce(per(100, 100)))
	sameDecision(t, "the token carried over", decide(t, l, throttle.Request{Tenant: "acme", JobID: "a", At: at}),
		throttle.Decision{Outcome: throttle.Admitted})
	sameDecision(t, "the next, at 100/s", decide(t, l, throttle.Request{Tenant: "acme", JobID: "b", At: at}),
		throttle.Decision{Outcome: throttle.Reserved, Wait: in(10 * ms)})
	// A raised burst fills up to the new burst at the new rate: half a
	// second on, 50 tokens less the slot reserved.
	at = at.Add(in(500 * ms))
	n := 0
	for decide(t, l, throttle.Request{Tenant: "acme", At: at}).Outcome == throttle.Admitted {
		n++
	}
	if n != 49 {
		t.Fatalf("half a second after raising to 100/s:100: %d admitted at once, want 49", n)
	}
}

// A changed limit is written in the new rate's units by the first call
// that names it, even one that charges nothing, so the old rate stops
// filling the bucket at once.
func TestChangedLimitIsWrittenByTheFirstCall(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	l, live := newLiveLimiter(t, e, time.Hour, throttle.Enforce(per(100, 100)))
	reserveN(t, l, "acme", "burst", 100, t0)
	key := e.prefix + ":{acme}:l:60000000"
	rateOf := func() uint32 {
		t.Helper()
		v, err := e.rdb.Get(ctx, key).Bytes()
		if err != nil || len(v) != 16 {
			t.Fatalf("GET %s: %q, %v; want 16 bytes", key, v, err)
		}
		return binary.LittleEndian.Uint32(v[12:])
	}
	if r := rateOf(); r != 100 {
		t.Fatalf("stored rate %d, want 100", r)
	}
	live.set(throttle.Enforce(per(20, 20)))
	// Without a job id, a limited job is not charged.
	if d := decide(t, l, throttle.Request{Tenant: "acme", At: t0}); d.Outcome != throttle.Limited {
		t.Fatalf("job without id under 20/s: %+v, want limited", d)
	}
	if r := rateOf(); r != 20 {
		t.Fatalf("stored rate after the uncharged call %d, want 20", r)
	}
}

// Workers that disagree for a moment about a tenant's rate charge the same
// bucket, each at its own, and the back and forth grants nothing: over a
// second of alternating limits the tenant gets no more than the higher
// limit alone would have given.
func TestAlternatingLimitsGrantNothing(t *testing.T) {
	e := setup(t)
	high, low := throttle.Enforce(per(100, 10)), throttle.Enforce(per(20, 10))
	l, live := newLiveLimiter(t, e, 0, high)
	admitted := 0
	for i := range 1000 {
		if i%2 == 0 {
			live.set(high)
		} else {
			live.set(low)
		}
		at := t0.Add(in(time.Duration(i) * ms))
		if decide(t, l, throttle.Request{Tenant: "acme", At: at}).Outcome == throttle.Admitted {
			admitted++
		}
	}
	// 100/s:10 alone: the burst of 10 and 100 per second after it.
	if admitted > 10+100 {
		t.Fatalf("%d admitted in a second of alternating 100/s and 20/s, want at most 110", admitted)
	}
	if admitted < 10+20 {
		t.Fatalf("%d admitted in a second of alternating 100/s and 20/s, want at least the lower limit's 30", admitted)
	}
}

// Decision.Binding names the limit that set the wait.
func TestDecisionNamesTheLimitThatHeldIt(t *testing.T) {
	e := setup(t)
	l := newLimiter(t, e.rdb, e.prefix, time.Hour, throttle.Limits{throttle.PerSecond(10, 10), throttle.PerMinute(15, 15)})
	ds := reserveN(t, l, "acme", "a", 11, t0)
	if d := ds[10]; d.Outcome != throttle.Reserved || d.Binding != throttle.PerSecond(10, 10) || d.Wait != 100*ms {
		t.Fatalf("11th job: %+v, want reserved by 10/s for 100ms", d)
	}
	// A second later the second limit (15/min) binds: 11 taken, 4 left.
	ds = reserveN(t, l, "acme", "b", 5, t0.Add(2*time.Second))
	if d := ds[4]; d.Outcome != throttle.Reserved || d.Binding != throttle.PerMinute(15, 15) {
		t.Fatalf("16th job: %+v, want reserved by 15/min", d)
	}
}

// Jobs holding slots of a changed limit are decided again in a batch too,
// on the worker's path (one limit each) and the general one (two limits).
func TestChangedLimitInABatch(t *testing.T) {
	for _, c := range []struct {
		name     string
		old, new throttle.Policy
	}{
		{"one limit each", throttle.Enforce(per(100, 10)), throttle.Enforce(per(10, 10))},
		{"two limits", throttle.Enforce(per(100, 10), throttle.PerHour(60000, 60000)),
			throttle.Enforce(per(10, 10), throttle.PerHour(60000, 60000))},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := setup(t)
			l, live := newLiveLimiter(t, e, time.Hour, c.old)
			reserveN(t, l, "acme", "old", 30, t0) // old-10 at 10 ms, old-11 at 20 ms, …
			live.set(c.new)
			at := t0.Add(in(10 * ms))
			reqs := []throttle.Request{
				{Tenant: "acme", JobID: "old-10", At: at}, // at its slot
				{Tenant: "acme", JobID: "new-0", At: at},
				{Tenant: "acme", JobID: "old-11", At: at}, // early for its slot
			}
			want := []time.Duration{in(100 * ms), in(200 * ms), in(300 * ms)}
			for i, r := range l.DecideBatch(context.Background(), reqs) {
				if r.Err != nil {
					t.Fatalf("%s: %v", reqs[i].JobID, r.Err)
				}
				if r.Outcome != throttle.Reserved || r.Wait != want[i] {
					t.Errorf("%s: %+v, want reserved for %v under 10/s, the debt of the old slots forgiven", reqs[i].JobID, r.Decision, want[i])
				}
			}
			// The new slots hold.
			sameDecision(t, "old-10 at its new slot", decide(t, l, throttle.Request{Tenant: "acme", JobID: "old-10", At: at.Add(in(100 * ms))}),
				throttle.Decision{Outcome: throttle.Admitted})
		})
	}
}

// A limit that comes back (A, then B, then A again) revives no slot
// whose debt the change to B forgave: a job back to a slot reserved under
// the first A is decided again, as under B, not admitted on it on top of
// the jobs decided since (EPOCH in lua/rules.lua). Through each of
// decide's paths: one job under one limit, a batch, and two limits.
func TestALimitThatComesBackRevivesNoForgivenSlot(t *testing.T) {
	loose := throttle.Limit{Rate: 100000, Period: time.Hour, Burst: 100000}
	for _, c := range []struct {
		name  string
		batch bool
		extra []throttle.Limit
	}{{"one", false, nil}, {"batch", true, nil}, {"two limits", false, []throttle.Limit{loose}}} {
		t.Run(c.name, func(t *testing.T) {
			e := setup(t)
			pol := func(rate int64) throttle.Policy {
				return throttle.Enforce(append([]throttle.Limit{per(rate, 10)}, c.extra...)...)
			}
			l, live := newLiveLimiter(t, e, time.Hour, pol(100))
			run := func(ids []string, at time.Time) []throttle.Decision {
				t.Helper()
				if !c.batch {
					out := make([]throttle.Decision, len(ids))
					for i, id := range ids {
						out[i] = decide(t, l, throttle.Request{Tenant: "acme", JobID: id, At: at})
					}
					return out
				}
				reqs := make([]throttle.Request, len(ids))
				for i, id := range ids {
					reqs[i] = throttle.Request{Tenant: "acme", JobID: id, At: at}
				}
				var out []throttle.Decision
				for _, r := range l.DecideBatch(context.Background(), reqs) {
					if r.Err != nil {
						t.Fatal(r.Err)
					}
					out = append(out, r.Decision)
				}
				return out
			}
			ids := make([]string, 30)
			for i := range ids {
				ids[i] = fmt.Sprintf("old-%d", i)
			}
			if ds := run(ids, t0); ds[29].Outcome != throttle.Reserved || ds[29].Wait != in(200*ms) {
				t.Fatalf("30th job under 100/s: %+v, want reserved for 200ms", ds[29])
			}
			live.set(pol(10))
			if d := run([]string{"b-0", "b-1"}, t0)[0]; d.Outcome != throttle.Reserved {
				t.Fatalf("first job under 10/s: %+v, want reserved", d)
			}
			live.set(pol(100))
			run([]string{"a-0", "a-1"}, t0)
			if d := run([]string{"old-10", "a-2"}, t0.Add(in(10*ms)))[0]; d.Outcome == throttle.Admitted {
				t.Fatalf("old-10 back at its slot of the first 100/s after 10/s and 100/s again: admitted on it, want it decided again")
			}
		})
	}
}

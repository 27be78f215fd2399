package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/throttle"
)

// A sliding window is a term of a spec like any other, with N from 1 to
// 10,000 and a duration written as a unit or a Go duration.
func TestParseSliding(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want throttle.Policy
	}{
		{"sliding:10/s", throttle.Policy{Limits: throttle.Limits{throttle.SlidingWindow(10, time.Second)}}},
		{"sliding:1/h", throttle.Policy{Limits: throttle.Limits{throttle.SlidingWindow(1, time.Hour)}}},
		{"sliding:10000/8784h", throttle.Policy{Limits: throttle.Limits{throttle.SlidingWindow(10000, 366*24*time.Hour)}}},
		{" sliding:10000/1m30s ", throttle.Policy{Limits: throttle.Limits{throttle.SlidingWindow(10000, 90*time.Second)}}},
		{"100/s:200+sliding:5/10s+running:3+shadow", throttle.Policy{
			Limits: throttle.Limits{throttle.PerSecond(100, 200), throttle.SlidingWindow(5, 10*time.Second)}, Running: 3, Shadow: true}},
		// A bucket and a window of the same period are two terms.
		{"10/s+sliding:10/s", throttle.Policy{Limits: throttle.Limits{throttle.PerSecond(10, 10), throttle.SlidingWindow(10, time.Second)}}},
		{"sliding:3/m+sliding:100/h", throttle.Policy{Limits: throttle.Limits{throttle.SlidingWindow(3, time.Minute), throttle.SlidingWindow(100, time.Hour)}}},
	} {
		got, err := throttle.ParsePolicy(tc.spec, 0)
		if err != nil {
			t.Errorf("ParsePolicy(%q): %v", tc.spec, err)
			continue
		}
		if got.String() != tc.want.String() || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("ParsePolicy(%q) = %+v, want %+v", tc.spec, got, tc.want)
		}
		again, err := throttle.ParsePolicy(got.String(), 0)
		if err != nil || fmt.Sprint(again) != fmt.Sprint(got) {
			t.Errorf("ParsePolicy(%q) (from %q) = %+v, %v; want %+v", got.String(), tc.spec, again, err, got)
		}
	}
	for _, spec := range []string{
		"sliding:0/s", "sliding:10001/s", "sliding:-1/s", "sliding:1.5/s", "sliding:1e3/s",
		"sliding:10", "sliding:10/", "sliding:/s", "sliding:10/x", "sliding:10/-1s", "sliding:10/0s",
		"sliding:10/500us", "sliding:10/8785h", "sliding:10/1500ns",
		"sliding:10/s+sliding:20/s", "sliding:10/1m+sliding:5/60s", "sliding", "sliding:",
	} {
		if p, err := throttle.ParsePolicy(spec, 0); err == nil {
			t.Errorf("ParsePolicy(%q) = %+v, want an error", spec, p)
		}
	}
	if got := throttle.SlidingWindow(100, time.Minute).String(); got != "sliding:100/m" {
		t.Errorf("String() = %q, want sliding:100/m", got)
	}
}

// A job over a window with an id gets a slot when enough entries leave
// the span, and back at its slot it runs without a second charge; a job
// costing more than N is invalid, not limited.
func TestSlidingReservesInOrder(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	w := throttle.SlidingWindow(3, time.Minute)
	l := newLimiter(t, e.rdb, e.prefix, 10*time.Minute, throttle.Limits{w})
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for i := range 3 {
		if d := decide(t, l, throttle.Request{Tenant: "acme", JobID: fmt.Sprint("a", i), At: at(time.Duration(i) * time.Second)}); d.Outcome != throttle.Admitted {
			t.Fatalf("job %d: %+v, want admitted", i, d)
		}
	}
	// The fourth waits for the first to leave the span (at 60 s), the
	// fifth for the second (61 s), the sixth for the third (62 s).
	for i, want := range []time.Duration{57 * time.Second, 58 * time.Second, 59 * time.Second} {
		d := decide(t, l, throttle.Request{Tenant: "acme", JobID: fmt.Sprint("b", i), At: at(3 * time.Second)})
		if d.Outcome != throttle.Reserved || d.Wait != want || d.Binding != w {
			t.Fatalf("job b%d: %+v, want reserved for %s by %s", i, d, want, w)
		}
	}
	// A job without an id is limited, uncharged: it would run when the
	// entries reserved at 60 s leave the span, at 120 s.
	if d := decide(t, l, throttle.Request{Tenant: "acme", At: at(3 * time.Second)}); d.Outcome != throttle.Limited || d.Wait != 117*time.Second {
		t.Fatalf("job without an id: %+v, want limited for 117s", d)
	}
	z := e.prefix + ":{acme}:z:60000000"
	before := e.rdb.ZCard(ctx, z).Val()
	if d := decide(t, l, throttle.Request{Tenant: "acme", JobID: "b1", At: at(61 * time.Second)}); d.Outcome != throttle.Admitted {
		t.Fatalf("b1 back at its slot: %+v, want admitted", d)
	}
	if d := decide(t, l, throttle.Request{Tenant: "acme", JobID: "b2", At: at(61 * time.Second)}); d.Outcome != throttle.Reserved || d.Wait != time.Second {
		t.Fatalf("b2 back early: %+v, want the rest of its wait, 1s", d)
	}
	if after := e.rdb.ZCard(ctx, z).Val(); after != before {
		t.Fatalf("the window holds %d entries after jobs came back, %d before: charged twice", after, before)
	}
	// A later job waits behind the slots reserved before it, in order.
	if d := decide(t, l, throttle.Request{Tenant: "acme", JobID: "c", At: at(61 * time.Second)}); d.Outcome != throttle.Reserved || d.Wait != 59*time.Second {
		t.Fatalf("job c: %+v, want reserved for 59s (the span after b0)", d)
	}
	if ttl := e.rdb.PTTL(ctx, z).Val(); ttl < 10*time.Minute+time.Minute-time.Second {
		t.Fatalf("the window's TTL is %s, want at least the horizon plus the span", ttl)
	}
	_, err := l.Decide(ctx, throttle.Request{Tenant: "acme", Cost: 4, At: at(time.Hour)})
	var inv *throttle.InvalidError
	if !errors.As(err, &inv) || inv.Code != throttle.CodeCostOverBurst {
		t.Fatalf("cost 4 over sliding:3/m: %v, want invalid, cost over N", err)
	}
}

// A job under a bucket and a window waits for the longer of the two, and
// each key is under the tenant's hash tag.
func TestSlidingWithABucket(t *testing.T) {
	e := setup(t)
	w := throttle.SlidingWindow(4, time.Minute)
	b := throttle.PerSecond(1, 2)
	l := newLimiter(t, e.rdb, e.prefix, time.Hour, throttle.Limits{b, w})
	var got []throttle.Decision
	for i := range 6 {
		got = append(got, decide(t, l, throttle.Request{Tenant: "acme", JobID: fmt.Sprint("j", i), At: t0}))
	}
	// Jobs 0, 1 fit the bucket's burst; 2 and 3 wait for its tokens (1 s,
	// 2 s); 4 and 5 for the window (60 s, 60 s).
	want := []struct {
		o    throttle.Outcome
		wait time.Duration
		by   throttle.Limit
	}{{throttle.Admitted, 0, throttle.Limit{}}, {throttle.Admitted, 0, throttle.Limit{}},
		{throttle.Reserved, time.Second, b}, {throttle.Reserved, 2 * time.Second, b},
		{throttle.Reserved, time.Minute, w}, {throttle.Reserved, time.Minute, w}}
	for i, d := range got {
		if d.Outcome != want[i].o || d.Wait != want[i].wait || d.Binding != want[i].by {
			t.Errorf("job %d: %+v, want %v for %s by %v", i, d, want[i].o, want[i].wait, want[i].by)
		}
	}
	for _, k := range keys(t, e.rdb, e.prefix) {
		checkHashTag(t, k)
		if !strings.Contains(k, "{acme}") {
			t.Errorf("key %q is not under the tenant's tag", k)
		}
	}
}

// A shadow window admits every job, says what enforcing would have done,
// and keeps its entries apart from the enforced window's.
func TestSlidingShadow(t *testing.T) {
	e := setup(t)
	w := throttle.SlidingWindow(3, time.Second)
	enforced := newLimiter(t, e.rdb, e.prefix+"e", time.Minute, throttle.Limits{w})
	shadowed, live := newLiveLimiter(t, env{rdb: e.rdb, prefix: e.prefix + "s"}, time.Minute, throttle.Policy{Limits: throttle.Limits{w}, Shadow: true})
	for i := range 20 {
		req := throttle.Request{Tenant: "acme", JobID: fmt.Sprint("job-", i), At: t0.Add(time.Duration(i) * 100 * ms)}
		want := decide(t, enforced, req)
		got := decide(t, shadowed, req)
		if got.Outcome != throttle.Admitted || !got.Shadow {
			t.Fatalf("job %d in shadow mode: %+v, want admitted in shadow", i, got)
		}
		wantWait := time.Duration(0)
		if want.Outcome == throttle.Reserved {
			wantWait = want.Wait
		}
		if got.ShadowWait != wantWait {
			t.Fatalf("job %d: enforced %+v, shadow says it would wait %s", i, want, got.ShadowWait)
		}
	}
	for _, k := range keys(t, e.rdb, e.prefix+"s") {
		if !strings.Contains(k, ":y:") && !strings.Contains(k, ":j:") {
			t.Errorf("shadow mode wrote %q, not a shadow window", k)
		}
	}
	// Shadow off: the enforced window is empty, so three jobs run.
	live.set(throttle.Policy{Limits: throttle.Limits{w}})
	for i := range 3 {
		if d := decide(t, shadowed, throttle.Request{Tenant: "acme", At: t0.Add(2 * time.Second)}); d.Outcome != throttle.Admitted {
			t.Fatalf("job %d after shadow mode: %+v, want admitted", i, d)
		}
	}
}

// A live change of N grants nothing: the entries in the span count under
// the new N, raised or lowered.
func TestSlidingChangeOfNGrantsNothing(t *testing.T) {
	e := setup(t)
	l, live := newLiveLimiter(t, e, time.Minute, throttle.Policy{Limits: throttle.Limits{throttle.SlidingWindow(5, time.Minute)}})
	admitted := func(at time.Time, n int) int {
		t.Helper()
		k := 0
		for range n {
			if d := decide(t, l, throttle.Request{Tenant: "acme", At: at}); d.Outcome == throttle.Admitted {
				k++
			}
		}
		return k
	}
	if k := admitted(t0, 8); k != 5 {
		t.Fatalf("under 5/m: %d admitted, want 5", k)
	}
	live.set(throttle.Policy{Limits: throttle.Limits{throttle.SlidingWindow(10, time.Minute)}})
	if k := admitted(t0.Add(time.Second), 8); k != 5 {
		t.Fatalf("raised to 10/m: %d more admitted, want 5", k)
	}
	live.set(throttle.Policy{Limits: throttle.Limits{throttle.SlidingWindow(3, time.Minute)}})
	if k := admitted(t0.Add(30*time.Second), 3); k != 0 {
		t.Fatalf("lowered to 3/m with 10 in the span: %d admitted, want 0", k)
	}
	if k := admitted(t0.Add(60*time.Second), 3); k != 0 {
		t.Fatalf("lowered to 3/m with 5 in the span: %d admitted, want 0", k)
	}
	if k := admitted(t0.Add(61*time.Second), 5); k != 3 {
		t.Fatalf("lowered to 3/m with the span empty: %d admitted, want 3", k)
	}
}

// Peek reads a window as the engine decides it: its wait is the wait of
// the next job of cost 1, its entries that count and the next to leave.
func TestSlidingPeekAgrees(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	w := throttle.SlidingWindow(4, time.Second)
	l := newLimiter(t, e.rdb, e.prefix, 10*time.Second, throttle.Limits{throttle.PerSecond(100, 100), w})
	for i := range 30 {
		at := t0.Add(time.Duration(i) * 150 * ms)
		snap, err := l.Peek(ctx, "acme", at)
		if err != nil {
			t.Fatalf("Peek: %v", err)
		}
		// A job without an id is decided, uncharged when it must wait.
		d := decide(t, l, throttle.Request{Tenant: "acme", At: at})
		if d.Wait != snap.Wait {
			t.Fatalf("step %d: Peek says a job waits %s, the engine %+v", i, snap.Wait, d)
		}
		if d.Outcome == throttle.Admitted && snap.Buckets[1].Tokens < 1 {
			t.Fatalf("step %d: admitted, Peek saw %+v", i, snap.Buckets[1])
		}
		// And a job with an id, every third step, reserves ahead.
		if i%3 == 0 {
			decide(t, l, throttle.Request{Tenant: "acme", JobID: fmt.Sprint("j", i), At: at})
		}
	}
	snap, err := l.Peek(ctx, "acme", t0.Add(4500*ms))
	if err != nil {
		t.Fatalf("Peek: %v", err)
	}
	b := snap.Buckets[1]
	if !b.Stored || b.InSpan < 1 || b.NextLeaves.IsZero() || b.Tokens != float64(w.Rate-b.InSpan) {
		t.Fatalf("the window in Peek: %+v", b)
	}
}

// A window works under a running cap: admit decides it as decide does.
func TestSlidingUnderACap(t *testing.T) {
	w := throttle.SlidingWindow(1, time.Minute)
	ce := newCapEnv(t, throttle.Rules{Default: throttle.Policy{Limits: throttle.Limits{w}, Running: 1}}, throttle.CapOptions{})
	j1 := ce.job(t, "acme", "j1")
	wantOutcome(t, "j1", j1, throttle.Admitted)
	wantOutcome(t, "j2 while j1 runs", ce.job(t, "acme", "j2"), throttle.Capped)
	ce.finish(t, j1)
	// j2 was called; the window makes it wait 60 s for its slot.
	j2 := ce.job(t, "acme", "j2")
	if j2.Outcome != throttle.Reserved || j2.Wait != time.Minute || j2.Binding != w {
		t.Fatalf("j2 called: %+v, want Reserved for 60s by %s", j2.Decision, w)
	}
	ce.now = t0.Add(time.Minute)
	if j2 = ce.job(t, "acme", "j2"); j2.Outcome != throttle.Admitted || j2.Lease.Token == "" {
		t.Fatalf("j2 at its slot: %+v, want Admitted with a lease", j2.Decision)
	}
}

// A window's key of another type is a Redis error naming it, a malformed
// window is invalid, never a decision; and jobs of the largest cost are
// one admission each.
func TestSlidingStoredStateAndLargeCosts(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	w := throttle.SlidingWindow(throttle.MaxSliding, time.Second)
	l := newLimiter(t, e.rdb, e.prefix, 5*time.Second, throttle.Limits{w})
	z := e.prefix + ":{bad}:z:1000000"
	if err := e.rdb.Set(ctx, z, "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := l.Decide(ctx, throttle.Request{Tenant: "bad", At: t0})
	var re *throttle.RedisError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), z) {
		t.Fatalf("a string at the window's key: %v, want a Redis error naming %s", err, z)
	}
	// A window without a TTL, or with a malformed admission, is invalid
	// stored state, and nothing is written.
	for _, tc := range []struct {
		member string
		ttl    time.Duration
		code   throttle.Code
	}{{"1:1", 0, throttle.CodeStateTTL}, {"x", time.Minute, throttle.CodeState}} {
		e.rdb.Del(ctx, z)
		e.rdb.ZAdd(ctx, z, redis.Z{Score: 1, Member: tc.member})
		if tc.ttl > 0 {
			e.rdb.PExpire(ctx, z, tc.ttl)
		}
		_, err := l.Decide(ctx, throttle.Request{Tenant: "bad", At: t0})
		var inv *throttle.InvalidError
		if !errors.As(err, &inv) || inv.Code != tc.code {
			t.Fatalf("a window holding %q (TTL %s): %v, want invalid %v", tc.member, tc.ttl, err, tc.code)
		}
		if n := e.rdb.ZCard(ctx, z).Val(); n != 1 {
			t.Fatalf("a refused call left %d members", n)
		}
	}
	// 20 jobs of cost N: one runs, five reserve a second apart (the
	// horizon is 5 s), the rest are limited.
	var reqs []throttle.Request
	for i := range 20 {
		reqs = append(reqs, throttle.Request{Tenant: "acme", JobID: fmt.Sprint("j", i), Cost: throttle.MaxSliding, At: t0})
	}
	counts := map[throttle.Outcome]int{}
	for i, r := range l.DecideBatch(ctx, reqs) {
		if r.Err != nil {
			t.Fatalf("job %d: %v", i, r.Err)
		}
		counts[r.Decision.Outcome]++
	}
	if counts[throttle.Admitted] != 1 || counts[throttle.Reserved] != 5 || counts[throttle.Limited] != 14 {
		t.Fatalf("outcomes %v, want 1 admitted, 5 reserved, 14 limited", counts)
	}
	if n := e.rdb.ZCard(ctx, e.prefix+":{acme}:z:1000000").Val(); n != 6 {
		t.Fatalf("the window holds %d members, want 6: one per job charged", n)
	}
}

// A window whose span changes keeps its admissions (Carry), to count for
// the new span: the change grants nothing.
func TestSlidingCarriedToAnotherSpan(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	from := throttle.Policy{Limits: throttle.Limits{throttle.PerSecond(100, 100), throttle.SlidingWindow(5, time.Minute)}}
	to := throttle.Policy{Limits: throttle.Limits{throttle.PerSecond(100, 100), throttle.SlidingWindow(5, 2*time.Minute)}}
	l, live := newLiveLimiter(t, e, time.Hour, from)
	for i := range 5 {
		if d := decide(t, l, throttle.Request{Tenant: "acme", At: t0}); d.Outcome != throttle.Admitted {
			t.Fatalf("job %d: %+v, want admitted", i, d)
		}
	}
	for range 2 { // a second worker finds it done
		if err := l.Carry(ctx, "acme", from, to, t0.Add(time.Second)); err != nil {
			t.Fatalf("Carry: %v", err)
		}
	}
	live.set(to)
	if d := decide(t, l, throttle.Request{Tenant: "acme", At: t0.Add(61 * time.Second)}); d.Outcome != throttle.Limited || d.Wait != 59*time.Second {
		t.Fatalf("after the span grew to 2m: %+v, want limited for 59s", d)
	}
	if d := decide(t, l, throttle.Request{Tenant: "acme", At: t0.Add(2 * time.Minute)}); d.Outcome != throttle.Admitted {
		t.Fatalf("2m after the five: %+v, want admitted", d)
	}
	if n := e.rdb.Exists(ctx, e.prefix+":{acme}:z:60000000").Val(); n != 0 {
		t.Fatalf("the old span's window is still there")
	}
	if ttl := e.rdb.PTTL(ctx, e.prefix+":{acme}:z:120000000").Val(); ttl < time.Hour+2*time.Minute-time.Second {
		t.Fatalf("the new span's window has a TTL of %s, want at least the horizon plus the span", ttl)
	}
}

// Peek tells a window's units reserved ahead from those that ran: with
// N = 2, five jobs at t0 run two at t0, two at t0+1s and one at t0+2s.
func TestSlidingPeekShowsReservedAhead(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	l := newLimiter(t, e.rdb, e.prefix, 10*time.Second, throttle.Limits{throttle.SlidingWindow(2, time.Second)})
	for i := range 5 {
		decide(t, l, throttle.Request{Tenant: "acme", JobID: fmt.Sprint("j", i), At: t0})
	}
	for _, c := range []struct {
		at            time.Duration
		inSpan, ahead int64
	}{{0, 5, 3}, {1500 * ms, 3, 1}, {2500 * ms, 1, 0}} {
		snap, err := l.Peek(ctx, "acme", t0.Add(c.at))
		if err != nil {
			t.Fatalf("Peek: %v", err)
		}
		if b := snap.Buckets[0]; b.InSpan != c.inSpan || b.Ahead != c.ahead {
			t.Fatalf("at t0+%s: %d in the span, %d ahead; want %d, %d", c.at, b.InSpan, b.Ahead, c.inSpan, c.ahead)
		}
	}
}

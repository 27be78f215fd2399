package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/throttler/throttler/throttle"
)

// settle calls l.Settle and fails t on an error.
func settle(t *testing.T, l *throttle.Limiter, s throttle.Settlement) throttle.Settled {
	t.Helper()
	out, err := l.Settle(context.Background(), s)
	if err != nil {
		t.Fatalf("Settle(%+v): %v", s, err)
	}
	return out
}

// A job charged 1 that reports 16 leaves the bucket in debt by 15: the
// next jobs wait exactly as x/time/rate's do after a ReserveN of 15, and
// Shift says how much later it moves the slots reserved before: the wait
// it added (1.2 s: the bucket held 3 tokens, so 12 are owed).
func TestSettleDebtWaitsAsXRate(t *testing.T) {
	e := setup(t)
	lim := throttle.PerSecond(10, 20)
	l := newLimiter(t, e.rdb, e.prefix, time.Hour, throttle.Limits{lim})
	o := rate.NewLimiter(10, 20)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// The bucket is emptied to 2 tokens, then j0 reports 16 for its 1.
	for i := range 18 {
		decide(t, l, throttle.Request{Tenant: "acme", JobID: fmt.Sprint("j", i), At: at(0)})
		o.ReserveN(at(0), 1)
	}
	got := settle(t, l, throttle.Settlement{Tenant: "acme", JobID: "j0", Charged: 1, Cost: 16, Slot: at(0), At: at(100)})
	o.ReserveN(at(100), 15)
	// 2 tokens, 3 after 100 ms, less 15: 12 owed, paid at t0+1.3s.
	if !got.Applied || got.Charged != 15 || got.Refunded != 0 || got.Shift != 1200*time.Millisecond {
		t.Fatalf("settle: %+v, want applied, 15 charged, a shift of 1.2s", got)
	}
	for i, step := range []struct{ ms, cost int }{{200, 1}, {200, 3}, {5000, 2}, {5000, 20}} {
		d := decide(t, l, throttle.Request{Tenant: "acme", JobID: fmt.Sprint("k", i), Cost: int64(step.cost), At: at(step.ms)})
		want := o.ReserveN(at(step.ms), step.cost).DelayFrom(at(step.ms))
		if diff := d.Wait - want; diff < -time.Microsecond || diff > time.Microsecond {
			t.Fatalf("job %d (cost %d at t0+%dms): %+v, x/time/rate waits %s", i, step.cost, step.ms, d, want)
		}
		if (want == 0) != (d.Outcome == throttle.Admitted) {
			t.Fatalf("job %d: %+v, x/time/rate waits %s", i, d, want)
		}
	}
}

// A refund gives back at most the burst: the bucket is full again, its
// state deleted, and no more than the burst is admitted at once.
func TestSettleRefundCappedAtBurst(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	l := newLimiter(t, e.rdb, e.prefix, time.Hour, throttle.Limits{throttle.PerSecond(10, 20)})
	decide(t, l, throttle.Request{Tenant: "acme", JobID: "j0", Cost: 5, At: t0})
	got := settle(t, l, throttle.Settlement{Tenant: "acme", JobID: "j0", Charged: 5, Cost: 0, At: t0})
	if !got.Applied || got.Refunded != 5 || got.Charged != 0 || got.Shift != 0 {
		t.Fatalf("settle: %+v, want 5 refunded", got)
	}
	if n := e.rdb.Exists(ctx, e.prefix+":{acme}:l:1000000").Val(); n != 0 {
		t.Fatalf("the bucket full again still has a state")
	}
	if d := decide(t, l, throttle.Request{Tenant: "acme", JobID: "a", Cost: 20, At: t0}); d.Outcome != throttle.Admitted {
		t.Fatalf("the burst after the refund: %+v, want admitted", d)
	}
	if d := decide(t, l, throttle.Request{Tenant: "acme", JobID: "b", At: t0}); d.Outcome != throttle.Reserved || d.Wait != 100*time.Millisecond {
		t.Fatalf("one past the burst: %+v, want reserved for 100ms", d)
	}
	// 12 back of the 21 taken leaves 11 tokens: the next job runs now.
	settle(t, l, throttle.Settlement{Tenant: "acme", JobID: "a", Charged: 20, Cost: 8, At: t0})
	if d := decide(t, l, throttle.Request{Tenant: "acme", JobID: "c", At: t0}); d.Outcome != throttle.Admitted {
		t.Fatalf("after 12 back of 21 taken: %+v, want admitted", d)
	}
}

// A settle is applied once per job id: asked again (the job delivered
// again after a crash) it does nothing.
func TestSettleOnce(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	l := newLimiter(t, e.rdb, e.prefix, time.Hour, throttle.Limits{throttle.PerSecond(10, 20)})
	decide(t, l, throttle.Request{Tenant: "acme", JobID: "j0", At: t0})
	s := throttle.Settlement{Tenant: "acme", JobID: "j0", Charged: 1, Cost: 11, At: t0}
	if got := settle(t, l, s); !got.Applied {
		t.Fatalf("first settle: %+v, want applied", got)
	}
	key := e.prefix + ":{acme}:l:1000000"
	before := e.rdb.Get(ctx, key).Val()
	for range 3 {
		if got := settle(t, l, s); got.Applied || got.Charged != 0 {
			t.Fatalf("settle again: %+v, want nothing done", got)
		}
	}
	if after := e.rdb.Get(ctx, key).Val(); after != before {
		t.Fatalf("a second settle changed the bucket: %x, was %x", after, before)
	}
	marker := e.prefix + ":{acme}:st:j0"
	if ttl := e.rdb.PTTL(ctx, marker).Val(); ttl <= 0 {
		t.Fatalf("settled marker %s has TTL %s, want one", marker, ttl)
	}
	// A cost that did not change makes no call and writes nothing.
	if got := settle(t, l, throttle.Settlement{Tenant: "acme", JobID: "j1", Charged: 1, Cost: 1, At: t0}); got.Applied {
		t.Fatalf("unchanged cost: %+v", got)
	}
	if n := e.rdb.Exists(ctx, e.prefix+":{acme}:st:j1").Val(); n != 0 {
		t.Fatalf("an unchanged cost left a marker")
	}
}

// A sliding window: a debt is an admission of its own; a refund lets the
// oldest units leave, only while the job's own admission counts.
func TestSettleSliding(t *testing.T) {
	e := setup(t)
	l := newLimiter(t, e.rdb, e.prefix, time.Hour, throttle.Limits{throttle.SlidingWindow(10, 10*time.Second)})
	s := func(d time.Duration) time.Time { return t0.Add(d) }
	for i := range 10 {
		decide(t, l, throttle.Request{Tenant: "acme", JobID: fmt.Sprint("j", i), At: t0})
	}
	// j0 reports 0: its unit leaves, one job more fits now.
	settle(t, l, throttle.Settlement{Tenant: "acme", JobID: "j0", Charged: 1, Cost: 0, Slot: t0, At: s(time.Second)})
	if d := decide(t, l, throttle.Request{Tenant: "acme", JobID: "a", At: s(time.Second)}); d.Outcome != throttle.Admitted {
		t.Fatalf("after a refund of 1: %+v, want admitted", d)
	}
	if d := decide(t, l, throttle.Request{Tenant: "acme", JobID: "b", At: s(time.Second)}); d.Outcome != throttle.Reserved || d.Wait != 9*time.Second {
		t.Fatalf("the next: %+v, want reserved until t0+10s", d)
	}
	// A refund for a job whose admission left the span gives nothing.
	settle(t, l, throttle.Settlement{Tenant: "acme", JobID: "j1", Charged: 1, Cost: 0, Slot: t0, At: s(10 * time.Second)})
	// At t0+10s: a (t0+1s) and b (t0+10s) count; j2 reports 4 at
	// t0+10s: 3 units more, at t0+10s. 5 count: a job of cost 6 waits
	// until a leaves at t0+11s.
	settle(t, l, throttle.Settlement{Tenant: "acme", JobID: "b", Charged: 1, Cost: 4, Slot: s(10 * time.Second), At: s(10 * time.Second)})
	if d := decide(t, l, throttle.Request{Tenant: "acme", JobID: "c", Cost: 6, At: s(10 * time.Second)}); d.Outcome != throttle.Reserved || d.Wait != time.Second {
		t.Fatalf("cost 6 after a debt of 3: %+v, want reserved for 1s", d)
	}
}

// A refund of every unit a sliding window counts empties it: the set is
// gone, and the next job decides on a window of its own, not on a set
// left without a TTL (which refused the tenant's every job as invalid).
func TestSettleSlidingRefundEmpties(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	l := newLimiter(t, e.rdb, e.prefix, time.Hour, throttle.Limits{throttle.SlidingWindow(100, time.Minute)})
	key := e.prefix + ":{acme}:z:60000000"
	for _, old := range []bool{false, true} {
		at := t0
		if old {
			// An admission that left the span leads the set: it stays,
			// with its TTL, and the refund's own leaves with it.
			decide(t, l, throttle.Request{Tenant: "acme", JobID: "early", Cost: 10, At: t0.Add(-61 * time.Second)})
		}
		id := fmt.Sprint("j", old)
		if d := decide(t, l, throttle.Request{Tenant: "acme", JobID: id, Cost: 50, At: at}); d.Outcome != throttle.Admitted {
			t.Fatalf("old %v: a job of 50: %+v, want admitted", old, d)
		}
		settle(t, l, throttle.Settlement{Tenant: "acme", JobID: id, Charged: 50, Cost: 0, Slot: at, At: at.Add(time.Second)})
		if ttl := e.rdb.PTTL(ctx, key).Val(); ttl == -1 {
			t.Fatalf("old %v: the window after the refund has no TTL: %v", old, e.rdb.ZRangeWithScores(ctx, key, 0, -1).Val())
		}
		if d := decide(t, l, throttle.Request{Tenant: "acme", JobID: "x" + id, Cost: 100, At: at.Add(time.Second)}); d.Outcome != throttle.Admitted {
			t.Fatalf("old %v: a job of 100 after the refund: %+v, want admitted (the window is empty)", old, d)
		}
		if err := e.rdb.Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// A calendar window: the window holding the job's slot counts the
// difference, more or less, and a window that ended is left.
func TestSettleCalendar(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	l := newLimiter(t, e.rdb, e.prefix, time.Hour, throttle.Limits{throttle.CalendarWindow(10, "m", "")})
	for i := range 5 {
		decide(t, l, throttle.Request{Tenant: "acme", JobID: fmt.Sprint("j", i), At: t0})
	}
	key, field := e.prefix+":{acme}:c:m@UTC", fmt.Sprint(t0.UnixMicro())
	settle(t, l, throttle.Settlement{Tenant: "acme", JobID: "j0", Charged: 1, Cost: 5, Slot: t0, At: t0.Add(time.Second)})
	if n := e.rdb.HGet(ctx, key, field).Val(); n != "9" {
		t.Fatalf("count after a debt of 4: %s, want 9", n)
	}
	settle(t, l, throttle.Settlement{Tenant: "acme", JobID: "j1", Charged: 1, Cost: 0, Slot: t0, At: t0.Add(time.Second)})
	if n := e.rdb.HGet(ctx, key, field).Val(); n != "8" {
		t.Fatalf("count after a refund of 1: %s, want 8", n)
	}
	if d := decide(t, l, throttle.Request{Tenant: "acme", JobID: "a", Cost: 2, At: t0.Add(2 * time.Second)}); d.Outcome != throttle.Admitted {
		t.Fatalf("cost 2 of the 2 left: %+v, want admitted", d)
	}
	if d := decide(t, l, throttle.Request{Tenant: "acme", JobID: "b", At: t0.Add(2 * time.Second)}); d.Outcome != throttle.Reserved || d.Wait != 58*time.Second {
		t.Fatalf("one more: %+v, want reserved until the next minute", d)
	}
	// The minute ended: j2's refund settles nothing.
	next := fmt.Sprint(t0.Add(time.Minute).UnixMicro())
	settle(t, l, throttle.Settlement{Tenant: "acme", JobID: "j2", Charged: 1, Cost: 0, Slot: t0, At: t0.Add(61 * time.Second)})
	if n := e.rdb.HGet(ctx, key, next).Val(); n != "1" {
		t.Fatalf("the next minute's count after a refund of the last: %s, want 1", n)
	}
	if ttl := e.rdb.PTTL(ctx, key).Val(); ttl <= 0 {
		t.Fatalf("calendar hash TTL %s", ttl)
	}
}

// Credits: a debt takes the balance below 0, and no job draws on it until
// a top-up covers it; a refund gives back.
func TestSettleCredits(t *testing.T) {
	ce := newCreditEnv(t, "100/s:100+credits")
	ce.add(t, "acme", 10)
	ce.decideOK(t, cp("acme", "j0", 2, 1, 0))
	if got := settle(t, ce.l, throttle.Settlement{Tenant: "acme", JobID: "j0", Charged: 2, Cost: 12, At: t0}); !got.Applied {
		t.Fatalf("settle: %+v", got)
	}
	if b := ce.balance(t, "acme"); b.Balance != -2 || !b.Trusted {
		t.Fatalf("balance after a debt of 10 on 8: %+v, want -2, trusted", b)
	}
	if d := ce.decideOK(t, cp("acme", "j1", 1, 2, 0)); d[0].Outcome != throttle.Unfunded {
		t.Fatalf("a job on a balance in debt: %+v, want unfunded", d[0])
	}
	ce.add(t, "acme", 3)
	if d := ce.decideOK(t, cp("acme", "j1", 1, 2, 0)); d[0].Outcome != throttle.Admitted {
		t.Fatalf("after a top-up of 3: %+v, want admitted", d[0])
	}
	settle(t, ce.l, throttle.Settlement{Tenant: "acme", JobID: "j1", Charged: 1, Cost: 0, At: t0})
	if b := ce.balance(t, "acme"); b.Balance != 1 {
		t.Fatalf("balance after a refund of 1 on 0: %+v, want 1", b)
	}
}

// A shadow policy settles its shadow bucket, never the enforced one, and
// not the credits.
func TestSettleShadow(t *testing.T) {
	ce := newCreditEnv(t, "10/s:10+credits+shadow")
	ctx := context.Background()
	settle(t, ce.l, throttle.Settlement{Tenant: "acme", JobID: "j0", Charged: 1, Cost: 5, At: t0})
	if n := ce.rdb.Exists(ctx, ce.prefix+":{acme}:s:1000000").Val(); n != 1 {
		t.Fatalf("the shadow bucket was not charged")
	}
	if n := ce.rdb.Exists(ctx, ce.prefix+":{acme}:l:1000000", ce.prefix+":{acme}:c").Val(); n != 0 {
		t.Fatalf("a shadow settle wrote the enforced bucket or the credits")
	}
}

// Bad arguments and stored values are refused as invalid (or WRONGTYPE),
// apart from Redis errors, before anything is written.
func TestSettleRawInvalid(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	fn := throttle.SettleFunction()
	p := e.prefix + ":{acme}:"
	keys := []string{p + "st:j", p + "l:1000000"}
	ok := []string{"0", "60000", "1", "5", "0", "0", "0", "10", "1000000", "10"}
	with := func(i int, v string) []string {
		a := append([]string(nil), ok...)
		a[i] = v
		return a
	}
	for _, c := range []struct {
		args      []string
		code, pos int64
	}{
		{with(0, "-1"), 2, 1}, {with(1, "0"), 18, 2}, {with(2, "3"), 30, 3}, {with(3, "0"), 29, 4},
		{with(3, "1.5"), 29, 4}, {with(4, "1e3"), 2, 5}, {with(5, "4"), 30, 6}, {with(6, "x"), 4, 7},
		{with(7, "0"), 6, 8}, {with(8, "10"), 7, 9}, {with(9, "0"), 8, 10},
	} {
		got := fcallRaw(t, e.rdb, fn, keys, c.args)
		if got[0] != 3 || got[1] != c.code || got[2] != c.pos {
			t.Errorf("args %q: %v, want INVALID code %d at %d", c.args, got, c.code, c.pos)
		}
	}
	if ks := keys2(t, e); len(ks) != 0 {
		t.Fatalf("invalid calls wrote %v", ks)
	}
	// Stored values: a malformed marker, a bucket of another type, a
	// malformed bucket state.
	e.rdb.Set(ctx, p+"st:j", "x", time.Minute)
	if got := fcallRaw(t, e.rdb, fn, keys, ok); got[0] != 3 || got[1] != 31 || got[2] != 1 {
		t.Fatalf("malformed marker: %v, want INVALID E_SETTLED at 1", got)
	}
	e.rdb.Del(ctx, p+"st:j")
	e.rdb.RPush(ctx, p+"l:1000000", "x")
	if got := fcallRaw(t, e.rdb, fn, keys, ok); got[0] != 5 || got[1] != 2 {
		t.Fatalf("bucket of another type: %v, want WRONGTYPE at 2", got)
	}
	e.rdb.Del(ctx, p+"l:1000000")
	e.rdb.Set(ctx, p+"l:1000000", "short", time.Minute)
	if got := fcallRaw(t, e.rdb, fn, keys, ok); got[0] != 3 || got[1] != 10 || got[2] != 2 {
		t.Fatalf("malformed state: %v, want INVALID E_STATE at 2", got)
	}
	if n := e.rdb.Exists(ctx, p+"st:j").Val(); n != 0 {
		t.Fatalf("a refused settle wrote its marker")
	}
	// KEYS and ARGV that do not fit: BADCALL, an invalid input in Go.
	if _, err := fcallErr(e.rdb, fn, keys[:1], ok); err == nil {
		t.Fatalf("a term without its key: no error")
	}
	l := newLimiter(t, e.rdb, e.prefix, time.Hour, throttle.Limits{throttle.PerSecond(10, 10)})
	for _, s := range []throttle.Settlement{
		{Tenant: "acme", Charged: 1, Cost: 2},
		{Tenant: "acme", JobID: "j", Charged: 1, Cost: -1},
		{Tenant: "acme", JobID: "j", Charged: 1, Cost: throttle.MaxBurst + 1},
		{Tenant: "", JobID: "j", Charged: 1, Cost: 2},
	} {
		if _, err := l.Settle(ctx, s); !errors.Is(err, throttle.ErrInvalid) || errors.Is(err, throttle.ErrRedis) {
			t.Errorf("Settle(%+v): %v, want ErrInvalid", s, err)
		}
	}
}

// keys2 lists every key under e's prefix.
func keys2(t *testing.T, e env) []string { return keys(t, e.rdb, e.prefix) }

package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/lua"
	"github.com/throttler/throttler/throttle"
)

// libFn is the name this version gives the library's function fn.
func libFn(fn string) string { return fn + "_" + strings.TrimPrefix(decideFn(), "decide_") }

// fcallReply calls fn with the library loaded and returns its reply as it
// came: integers and strings.
func fcallReply(t *testing.T, rdb *redis.Client, fn string, keys []string, args []string) ([]any, error) {
	t.Helper()
	ctx := context.Background()
	code, _, _, _, _ := throttle.Library()
	if err := rdb.FunctionLoadReplace(ctx, code).Err(); err != nil {
		t.Fatalf("FUNCTION LOAD: %v", err)
	}
	argv := make([]any, len(args))
	for i, a := range args {
		argv[i] = a
	}
	v, err := rdb.FCall(ctx, fn, keys, argv...).Result()
	if err != nil {
		return nil, err
	}
	arr, ok := v.([]any)
	if !ok {
		t.Fatalf("FCALL %s: reply %#v, want an array", fn, v)
	}
	return arr, nil
}

// us is t in µs since the Unix epoch, as text.
func us(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }

// capSets are the Redis keys of tenant's cap in ce.
func (ce *capEnv) capSets(tenant string) (leases, queue, places string) {
	tag := "{" + tenant + "}"
	return ce.prefix + ":" + tag + ":r", ce.prefix + ":" + tag + ":w", ce.prefix + ":" + tag + ":p"
}

// dump returns the serialized value of each key ("" for none).
func dump(t *testing.T, rdb *redis.Client, keys ...string) []string {
	t.Helper()
	var out []string
	for _, k := range keys {
		v, err := rdb.Dump(context.Background(), k).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("DUMP %s: %v", k, err)
		}
		out = append(out, v)
	}
	return out
}

// noKeyWithoutTTL fails t if a key of prefix lives for ever.
func noKeyWithoutTTL(t *testing.T, rdb *redis.Client, prefix string) {
	t.Helper()
	for _, k := range keys(t, rdb, prefix) {
		// -1: no TTL (-2 is a key gone since KEYS).
		if ttl := rdb.PTTL(context.Background(), k).Val(); ttl == -1 {
			t.Errorf("key %s has no TTL (PTTL %v)", k, ttl)
		}
	}
}

// The library is loaded with every bound written in, the values of
// package lua: the same numbers the Go side splits its work by.
func TestBoundsWrittenIn(t *testing.T) {
	code, _, _, _, _ := throttle.Library()
	if i := strings.Index(code, "__MAX_"); i >= 0 {
		t.Fatalf("a bound's placeholder left in the library loaded: %q", code[i:i+20])
	}
	for name, v := range map[string]int{"MAX_JOBS": lua.MaxJobs, "MAX_LIMITS": lua.MaxLimits, "MAX_CHARGES": lua.MaxCharges, "MAX_RENEW": lua.MaxRenew,
		"MAX_SWEEP": lua.MaxSweep, "MAX_CALLS": lua.MaxCalls, "MAX_MEMBER": lua.MaxMember,
		"MAX_WINDOW": lua.MaxWindow} {
		if want := fmt.Sprintf("local %s = %d\n", name, v); !strings.Contains(code, want) {
			t.Errorf("library lacks %q", want)
		}
	}
	if throttle.MaxLimits != lua.MaxLimits {
		t.Errorf("throttle.MaxLimits %d, lua.MaxLimits %d", throttle.MaxLimits, lua.MaxLimits)
	}
}

// Renewing more leases than one call may renew is split into calls of at
// most lua.MaxRenew: every lease that counts is renewed, the one that
// expired is reported lost, and a call of one token more is refused.
func TestRenewIsSplitAtItsBound(t *testing.T) {
	ce := newCapEnv(t, throttle.Rules{Default: throttle.Policy{Running: 10_000}}, throttle.CapOptions{LeaseTTL: 30 * time.Second})
	ctx := context.Background()
	lk, wk, pk := ce.capSets("acme")
	n := 2*lua.MaxRenew + 88
	var held []throttle.Lease
	for i := range n {
		tok := fmt.Sprintf("tok%05d", i)
		score := float64(t0.Add(10 * time.Second).UnixMicro())
		if i == 7 {
			score = float64(t0.Add(time.Second).UnixMicro()) // expired by the renewal
		}
		ce.rdb.ZAdd(ctx, lk, redis.Z{Score: score, Member: tok})
		held = append(held, throttle.Lease{Tenant: "acme", Token: tok})
	}
	ce.rdb.PExpire(ctx, lk, time.Hour)
	ce.now = t0.Add(5 * time.Second)
	lost, err := ce.c.Renew(ctx, held)
	if err != nil {
		t.Fatalf("Renew of %d leases: %v", n, err)
	}
	if len(lost) != 1 || lost[0].Token != "tok00007" {
		t.Fatalf("lost %v, want only tok00007", lost)
	}
	want := float64(ce.now.Add(30 * time.Second).UnixMicro())
	for i, ls := range held {
		s := ce.rdb.ZScore(ctx, lk, ls.Token).Val()
		if i != 7 && s != want {
			t.Fatalf("lease %s at %v, want renewed to %v", ls.Token, s, want)
		}
	}
	args := []string{"2", us(ce.now), "10000", "30000", "5000", "3600000"}
	for i := range lua.MaxRenew + 1 {
		args = append(args, held[i].Token)
	}
	if _, err := fcallReply(t, ce.rdb, libFn("lease"), []string{lk, wk, pk}, args); err == nil || !strings.HasPrefix(err.Error(), "BADCALL") {
		t.Fatalf("renewing %d tokens in one call: %v, want BADCALL", lua.MaxRenew+1, err)
	}
}

// One call drops at most lua.MaxSweep expired leases and says it left
// some; Poke goes on until none is left.
func TestSweepIsBounded(t *testing.T) {
	ce := newCapEnv(t, throttle.Rules{Default: throttle.Policy{Running: 5}}, throttle.CapOptions{})
	ctx := context.Background()
	lk, wk, pk := ce.capSets("acme")
	n := 4*lua.MaxSweep + 3
	for i := range n {
		ce.rdb.ZAdd(ctx, lk, redis.Z{Score: float64(t0.Add(-time.Second).UnixMicro()), Member: fmt.Sprintf("dead%05d", i)})
	}
	ce.rdb.PExpire(ctx, lk, time.Hour)
	r, err := fcallReply(t, ce.rdb, libFn("lease"), []string{lk, wk, pk}, []string{"3", us(t0), "5", "30000", "5000", "3600000"})
	if err != nil {
		t.Fatal(err)
	}
	if r[2] != int64(1) {
		t.Fatalf("poke over %d expired leases: reply %v, want more (1) at [2]", n, r)
	}
	if left := ce.rdb.ZCard(ctx, lk).Val(); left != int64(n-lua.MaxSweep) {
		t.Fatalf("one poke left %d expired leases, want %d", left, n-lua.MaxSweep)
	}
	if _, err := ce.c.Poke(ctx, []string{"acme"}); err != nil {
		t.Fatal(err)
	}
	if left := ce.rdb.ZCard(ctx, lk).Val(); left != 0 {
		t.Fatalf("Poke left %d expired leases, want none", left)
	}
}

// However many called jobs fail to come back in time (more than one call
// sweeps), each goes back into the waiting list at the place it had, and
// they are called again in the order they had.
func TestExpiredCallsKeepTheirPlaces(t *testing.T) {
	ce := &capEnv{env: setup(t), now: t0}
	live := &livePolicies{def: throttle.Policy{Running: 1}}
	l, err := throttle.New(ce.rdb, throttle.Options{Policies: live, Horizon: time.Hour, Prefix: ce.prefix})
	if err != nil {
		t.Fatal(err)
	}
	c, err := makeEngine(l, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if ce.c, err = c.withCaps(l, throttle.CapOptions{CallTTL: time.Second, At: func() time.Time { return ce.now }}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ce.job(t, "acme", "j0")
	n := lua.MaxSweep + 44
	var want []string
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("j%d", i)
		r := ce.c.DecideBatch(ctx, []throttle.Copy{{Request: throttle.Request{Tenant: "acme", JobID: id, At: ce.now}, Incarnation: int64(i), Order: int64(1000 + i)}})
		wantOutcome(t, id, r[0], throttle.Capped)
		want = append(want, id)
	}
	// pokeAll pokes until nobody more is called, and returns who was.
	pokeAll := func() []string {
		var got []string
		for {
			w, err := ce.c.Poke(ctx, []string{"acme"})
			if err != nil {
				t.Fatalf("Poke: %v", err)
			}
			if len(w) == 0 {
				return got
			}
			got = append(got, ids(w)...)
		}
	}
	live.set(throttle.Policy{Running: 100_000})
	if got := pokeAll(); !slices.Equal(got, want) {
		t.Fatalf("called %d jobs %v..., want %d in order", len(got), got[:min(5, len(got))], n)
	}
	// None comes back within the call TTL.
	ce.now = t0.Add(3 * time.Second)
	if got := pokeAll(); !slices.Equal(got, want) {
		t.Fatalf("after the calls expired, called %d jobs, first %v; want all %d again, in the order they had",
			len(got), got[:min(5, len(got))], n)
	}
	noKeyWithoutTTL(t, ce.rdb, ce.prefix)
}

// A job that admit refuses (a stored value or its cost is bad) leaves
// everything as it was, even when expired calls were waiting to be put
// back into the list: the refusal is found before the first write.
func TestAdmitRefusalWritesNothing(t *testing.T) {
	ce := newCapEnv(t, throttle.Rules{Default: throttle.Policy{Running: 1, Limits: throttle.Limits{throttle.PerSecond(10, 10)}}},
		throttle.CapOptions{CallTTL: time.Second})
	ctx := context.Background()
	j1 := ce.job(t, "acme", "j1")
	wantOutcome(t, "j2", ce.job(t, "acme", "j2"), throttle.Capped)
	wantOutcome(t, "j3", ce.job(t, "acme", "j3"), throttle.Capped)
	if woke := ce.finish(t, j1); !slices.Equal(woke, []string{"j2"}) {
		t.Fatalf("woke %v, want [j2]", woke)
	}
	ce.now = t0.Add(2 * time.Second) // j2's call expired
	lk, wk, pk := ce.capSets("acme")
	state := ce.prefix + ":{acme}:l:1000000"
	before := dump(t, ce.rdb, lk, wk, pk)

	// A bucket state that is not one.
	ce.rdb.Set(ctx, state, "not a state", time.Hour)
	r := ce.c.DecideBatch(ctx, []throttle.Copy{{Request: throttle.Request{Tenant: "acme", JobID: "j4", At: ce.now}, Incarnation: 4}})
	if !errors.Is(r[0].Err, throttle.ErrInvalid) {
		t.Fatalf("j4 over a bad state: %+v, want ErrInvalid", r[0])
	}
	if after := dump(t, ce.rdb, lk, wk, pk); !slices.Equal(before, after) {
		t.Fatalf("a refused admit changed the cap's sets")
	}
	ce.rdb.Del(ctx, state)

	// A cost over the burst, sent raw (the Go API refuses it itself).
	args := []string{"1", "tok", "30000", "1000", "3600000", "j5", "0", us(ce.now),
		"3600000000", "11", "5", "1", "1", "10", "1000000", "10"}
	v, err := fcallReply(t, ce.rdb, libFn("admit"), []string{lk, wk, pk, state, ce.prefix + ":{acme}:j:j5", ce.prefix + ":{acme}:o:j5"}, args)
	if err != nil || v[0] != int64(3) || throttle.Code(v[1].(int64)) != throttle.CodeCostOverBurst {
		t.Fatalf("cost 11 over burst 10: %v %v, want INVALID over burst", v, err)
	}
	if after := dump(t, ce.rdb, lk, wk, pk); !slices.Equal(before, after) {
		t.Fatalf("a refused admit changed the cap's sets")
	}
	noKeyWithoutTTL(t, ce.rdb, ce.prefix)
}

// The longest tenant and job id the API takes fit the fleet's waiting
// list; one byte more than a member may hold is refused.
func TestLongestMembersFit(t *testing.T) {
	ce := newCapEnv(t, throttle.Rules{Default: throttle.Policy{Limits: throttle.Limits{throttle.PerSecond(1000, 1000)}}}, throttle.CapOptions{MaxRunning: 1})
	ctx := context.Background()
	ten := strings.Repeat("é", throttle.MaxTenantLen/2) // not plain: base64 in its tag
	id1, id2 := strings.Repeat("a", throttle.MaxJobIDLen), strings.Repeat("b/", throttle.MaxJobIDLen/2)
	decideAt := func(id string) throttle.Result {
		r := ce.c.DecideBatch(ctx, []throttle.Copy{{Request: throttle.Request{Tenant: ten, JobID: id, At: ce.now}, Incarnation: 1}})
		if r[0].Err != nil {
			t.Fatalf("job of %d bytes of tenant of %d bytes: %v", len(id), len(ten), r[0].Err)
		}
		return r[0]
	}
	first := decideAt(id1)
	wantOutcome(t, "first", first, throttle.Admitted)
	wantOutcome(t, "second", decideAt(id2), throttle.Capped)
	w, err := ce.c.Finish(ctx, first.Leases())
	if err != nil || len(w) != 1 || w[0] != (throttle.Waiter{Tenant: ten, JobID: id2}) {
		t.Fatalf("Finish woke %v, %v; want the second job", w, err)
	}
	lk, wk, pk := ce.capSets("~")
	args := []string{"1", "tok", "30000", "1000", "3600000", strings.Repeat("m", lua.MaxMember+1), "0", us(ce.now)}
	v, err := fcallReply(t, ce.rdb, libFn("admit"), []string{lk, wk, pk, ce.prefix + ":{~}:v"}, args)
	if err != nil || v[0] != int64(3) || throttle.Code(v[1].(int64)) != throttle.CodeMember {
		t.Fatalf("member of %d bytes: %v %v, want INVALID member", lua.MaxMember+1, v, err)
	}
}

// One call that names one bucket at two rates, the second finding it
// full, decides both (it raised a Lua error, failing every job of the
// call): a request under its tenant's policy and one with limits of its
// own, in the worker's form (one limit each) and the general one.
func TestOneBucketAtTwoRatesInOneCall(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name        string
		policy, own throttle.Limits
	}{
		{"one limit", throttle.Limits{throttle.PerSecond(10, 10)}, throttle.Limits{throttle.PerSecond(5, 1)}},
		{"two limits", throttle.Limits{throttle.PerSecond(10, 10), throttle.PerMinute(100, 100)},
			throttle.Limits{throttle.PerSecond(5, 1), throttle.PerMinute(100, 100)}},
	} {
		for _, jobID := range []string{"", "j"} {
			ten := strings.ReplaceAll(tc.name, " ", "-") + "-" + jobID
			l := newLimiter(t, e.rdb, e.prefix, time.Hour, tc.policy)
			id := func(k string) string {
				if jobID == "" {
					return ""
				}
				return k
			}
			rs := l.DecideBatch(ctx, []throttle.Request{
				{Tenant: ten, JobID: id("a"), At: t0},
				{Tenant: ten, JobID: id("b"), At: t0, Limits: tc.own},
				{Tenant: ten, JobID: id("c"), At: t0},
			})
			for k, r := range rs {
				if r.Err != nil {
					t.Fatalf("%s, job id %q, request %d: %v", tc.name, jobID, k, r.Err)
				}
			}
			if rs[0].Outcome != throttle.Admitted || rs[1].Outcome != throttle.Admitted {
				t.Fatalf("%s: %+v, %+v; want both admitted", tc.name, rs[0].Decision, rs[1].Decision)
			}
		}
	}
	noKeyWithoutTTL(t, e.rdb, e.prefix)
}

// One decide call charges at most lua.MaxCharges buckets: a raw call of
// more is refused, and DecideBatch splits 64 jobs of eight limits each
// into calls under the bound, all decided.
func TestChargesPerCallBound(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	var ls throttle.Limits
	for k := range throttle.MaxLimits {
		ls = append(ls, throttle.Limit{Rate: 10, Period: time.Duration(k+1) * time.Second, Burst: 10})
	}
	jobs := lua.MaxCharges/throttle.MaxLimits + 1
	var keys, args []string
	args = append(args, us(t0), "3600000000")
	for j := range jobs {
		for k := range ls {
			keys = append(keys, fmt.Sprintf("%s:{t%d}:l:%d", e.prefix, j, (k+1)*1_000_000))
		}
		args = append(args, "1", "0", "0", strconv.Itoa(len(ls)))
		for k := range ls {
			args = append(args, "10", strconv.Itoa((k+1)*1_000_000), "10")
		}
	}
	if _, err := fcallErr(e.rdb, decideFn(), keys, args); err == nil || !strings.HasPrefix(err.Error(), "BADCALL") {
		t.Fatalf("%d jobs of %d limits in one call: %v, want BADCALL", jobs, len(ls), err)
	}
	l := newLimiter(t, e.rdb, e.prefix, time.Hour, ls)
	reqs := make([]throttle.Request, lua.MaxJobs)
	for i := range reqs {
		reqs[i] = throttle.Request{Tenant: fmt.Sprintf("t%02d", i), JobID: "j", At: t0}
	}
	for i, r := range l.DecideBatch(ctx, reqs) {
		if r.Err != nil || r.Outcome != throttle.Admitted || r.Remaining != 9 {
			t.Fatalf("request %d: %+v, want admitted with 9 left", i, r)
		}
	}
}

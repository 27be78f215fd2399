package throttle_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// TestCreditsFunctionArgs calls the credits, refund and balance functions
// raw with bad arguments: each is refused (INVALID with its code and
// position, or BADCALL for a layout that does not fit) and nothing is
// written, the good jobs of a call decided as if the bad one were not
// there.
func TestCreditsFunctionArgs(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	credits, refund, balance := throttle.CreditsFunctions()
	bk, pk := throttle.CreditsKeys(e.prefix, "a", "j1")
	l := newLimiter(t, e.rdb, e.prefix, 0, throttle.Limits{throttle.PerSecond(1, 1)})
	if _, err := l.SetCredits(ctx, "a", 10); err != nil {
		t.Fatal(err)
	}
	if err := l.OpenCredits(ctx, "a", 0, 0); err != nil {
		t.Fatal(err)
	}
	before, err := e.rdb.HGetAll(ctx, bk).Result()
	if err != nil {
		t.Fatal(err)
	}
	unchanged := func(what string) {
		t.Helper()
		after, err := e.rdb.HGetAll(ctx, bk).Result()
		if err != nil || len(after) != len(before) {
			t.Fatalf("%s: balance %v, was %v (%v)", what, after, before, err)
		}
		for k, v := range before {
			if after[k] != v {
				t.Fatalf("%s: balance field %s %q, was %q", what, k, after[k], v)
			}
		}
		if n := e.rdb.Exists(ctx, pk).Val(); n != 0 {
			t.Fatalf("%s: a paid marker was written", what)
		}
	}
	const (
		eNow, eCost, eTTL, eIncarnation, eFlags = 2, 3, 18, 14, 17
		eCredits, ePaid, eOrder, eAmount, eOp   = 25, 26, 28, 29, 24
	)
	one := func(now, ttl, cost, order, inc, flags string) []string {
		return []string{now, ttl, cost, order, inc, flags}
	}
	for _, c := range []struct {
		what      string
		args      []string
		code, at  int64
		wholeCall bool
	}{
		{"now 1.5", one("1.5", "1000", "1", "0", "0", "4"), eNow, 1, true},
		{"now -1", one("-1", "1000", "1", "0", "0", "4"), eNow, 1, true},
		{"TTL 0", one("0", "0", "1", "0", "0", "4"), eTTL, 2, true},
		{"TTL 1e3", one("0", "1e3", "1", "0", "0", "4"), eTTL, 2, true},
		{"flags 16", one("0", "1000", "1", "0", "0", "20"), eFlags, 6, true},
		{"cost 0", one("0", "1000", "0", "0", "0", "4"), eCost, 3, false},
		{"cost 2e9", one("0", "1000", "2000000000", "0", "0", "4"), eCost, 3, false},
		{"order -1", one("0", "1000", "1", "-1", "0", "4"), eOrder, 4, false},
		{"order 2^53", one("0", "1000", "1", "9007199254740992", "0", "4"), eOrder, 4, false},
		{"incarnation x", one("0", "1000", "1", "0", "x", "4"), eIncarnation, 5, false},
	} {
		v := fcallRaw(t, e.rdb, credits, []string{bk, pk}, c.args)
		if len(v) != 4 || v[0] != 3 || v[1] != c.code || v[2] != c.at {
			t.Fatalf("%s: reply %v, want INVALID %d at %d", c.what, v, c.code, c.at)
		}
		unchanged(c.what)
	}
	// A bad job alone fails: the good one after it is charged.
	v := fcallRaw(t, e.rdb, credits, []string{bk, pk}, []string{"0", "1000", "0", "0", "0", "0", "2", "0", "0", "4"})
	if len(v) != 8 || v[0] != 3 || v[1] != eCost || v[4] != 1 || v[5] != 1 || v[6] != 8 {
		t.Fatalf("a bad job then a good one: %v", v)
	}
	e.rdb.Del(ctx, pk)
	e.rdb.HSet(ctx, bk, "b", "10")
	for what, c := range map[string]struct{ keys, args []string }{
		"no job":              {[]string{bk}, []string{"0", "1000"}},
		"a marker too many":   {[]string{bk, pk}, one("0", "1000", "1", "0", "0", "0")},
		"a marker missing":    {[]string{bk}, one("0", "1000", "1", "0", "0", "4")},
		"half a job":          {[]string{bk, pk}, []string{"0", "1000", "1", "0", "0"}},
		"no balance key":      {nil, one("0", "1000", "1", "0", "0", "0")},
		"refund: args ≠ keys": {[]string{bk, pk}, []string{"0"}},
	} {
		fn := credits
		if strings.HasPrefix(what, "refund") {
			fn = refund
		}
		if _, err := fcallErr(e.rdb, fn, c.keys, c.args); err == nil || !strings.HasPrefix(err.Error(), "BADCALL") {
			t.Fatalf("%s: %v, want BADCALL", what, err)
		}
		unchanged(what)
	}
	for what, c := range map[string]struct {
		fn       string
		keys     []string
		args     []string
		code, at int64
	}{
		"refund 1.5":             {refund, []string{bk}, []string{"1.5"}, eAmount, 1},
		"refund incarnation -1":  {refund, []string{bk, pk}, []string{"0", "-1"}, eIncarnation, 2},
		"balance op 5":           {balance, []string{bk}, []string{"5", "0"}, eOp, 1},
		"balance now x":          {balance, []string{bk}, []string{"1", "x"}, eNow, 2},
		"add 0":                  {balance, []string{bk}, []string{"2", "0", "0", "0"}, eAmount, 3},
		"add 2^53":               {balance, []string{bk}, []string{"2", "0", "9007199254740992", "0"}, eAmount, 3},
		"add past the max":       {balance, []string{bk}, []string{"2", "0", "9007199254740990", "0"}, eAmount, 3},
		"set -1":                 {balance, []string{bk}, []string{"3", "0", "-1", "0"}, eAmount, 3},
		"set, a gate of 31 days": {balance, []string{bk}, []string{"3", "0", "1", "2678400000000"}, 4, 4},
		"open 1.5":               {balance, []string{bk}, []string{"4", "0", "1.5"}, 4, 3},
	} {
		v := fcallRaw(t, e.rdb, c.fn, c.keys, c.args)
		if len(v) != 4 || v[0] != 3 || v[1] != c.code || v[2] != c.at {
			t.Fatalf("%s: reply %v, want INVALID %d at %d", what, v, c.code, c.at)
		}
		unchanged(what)
	}
	// Malformed markers: the job fails alone, nothing written.
	for what, m := range map[string]string{"no colon": "3", "a sign": "-3:1", "too long": "12345678901:1"} {
		e.rdb.Set(ctx, pk, m, time.Hour)
		v := fcallRaw(t, e.rdb, credits, []string{bk, pk}, one("0", "1000", "1", "0", "0", "4"))
		if v[0] != 3 || v[1] != ePaid || v[2] != 2 {
			t.Fatalf("marker %s: %v", what, v)
		}
		if got := e.rdb.Get(ctx, pk).Val(); got != m {
			t.Fatalf("marker %s rewritten: %q", what, got)
		}
	}
	// A marker of another type: that job is WRONGTYPE, the next one decided.
	_, pk2 := throttle.CreditsKeys(e.prefix, "a", "j2")
	e.rdb.Del(ctx, pk)
	e.rdb.RPush(ctx, pk, "x")
	v = fcallRaw(t, e.rdb, credits, []string{bk, pk, pk2}, []string{"0", "1000", "1", "0", "0", "4", "1", "0", "0", "4"})
	if len(v) != 8 || v[0] != 5 || v[1] != 2 || v[4] != 1 || v[5] != 1 {
		t.Fatalf("a marker of another type, then a job: %v", v)
	}
	lc, err := throttle.New(e.rdb, throttle.Options{Policies: throttle.Rules{Default: throttle.Policy{Credits: throttle.CreditsWait}}, Prefix: e.prefix})
	if err != nil {
		t.Fatal(err)
	}
	if r := lc.DecideBatch(ctx, []throttle.Request{{Tenant: "a", JobID: "j1", At: t0}}); !errors.Is(r[0].Err, throttle.ErrRedis) || !strings.Contains(r[0].Err.Error(), "WRONGTYPE") {
		t.Fatalf("Limiter.DecideBatch over a marker of another type: %+v", r[0])
	}
	e.rdb.Del(ctx, pk, pk2)
	e.rdb.Set(ctx, pk, "3:1", 0)
	if v := fcallRaw(t, e.rdb, credits, []string{bk, pk}, one("0", "1000", "1", "0", "0", "4")); v[0] != 3 || v[1] != ePaid+1 {
		t.Fatalf("a marker without TTL: %v", v)
	}
	e.rdb.Del(ctx, pk)
	e.rdb.HSet(ctx, bk, "q", "0")
	if v := fcallRaw(t, e.rdb, credits, []string{bk}, one("0", "1000", "1", "0", "0", "0")); v[0] != 3 || v[1] != eCredits || v[2] != 1 {
		t.Fatalf("a waiting order of 0: %v", v)
	}
	if snap, err := l.Peek(ctx, "a", time.Time{}); err != nil || snap.Credits != nil {
		t.Fatalf("Peek of a tenant without credits: %+v, %v", snap.Credits, err)
	}
}

// TestCreditsRefundOnlyTheCharger: a refund gives a job's credits back
// only when the marker still names the incarnation that paid; once
// another incarnation passed on the charge (and may run), it gives
// nothing back.
func TestCreditsRefundOnlyTheCharger(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	credits, refund, _ := throttle.CreditsFunctions()
	bk, pk := throttle.CreditsKeys(e.prefix, "a", "j1")
	l := newLimiter(t, e.rdb, e.prefix, 0, throttle.Limits{throttle.PerSecond(1, 1)})
	if _, err := l.SetCredits(ctx, "a", 10); err != nil {
		t.Fatal(err)
	}
	if err := l.OpenCredits(ctx, "a", 0, 0); err != nil {
		t.Fatal(err)
	}
	job := func(inc string) []int64 {
		return fcallRaw(t, e.rdb, credits, []string{bk, pk}, []string{"0", "60000", "4", "0", inc, "4"})
	}
	if v := job("1"); v[0] != 1 || v[1] != 1 || v[2] != 6 {
		t.Fatalf("incarnation 1: %v, want charged, 6 left", v)
	}
	if v := job("2"); v[0] != 1 || v[1] != 0 || v[2] != 6 {
		t.Fatalf("incarnation 2: %v, want paid already", v)
	}
	if v := fcallRaw(t, e.rdb, refund, []string{bk, pk}, []string{"0", "1"}); v[0] != 1 || v[1] != 0 {
		t.Fatalf("refund of incarnation 1: %v, want nothing given", v)
	}
	if got := e.rdb.Get(ctx, pk).Val(); got != "4:2" {
		t.Fatalf("marker %q, want 4:2", got)
	}
	if v := fcallRaw(t, e.rdb, refund, []string{bk, pk}, []string{"3", "2"}); v[0] != 1 || v[1] != 7 || v[2] != 13 {
		t.Fatalf("refund of incarnation 2 and 3 without id: %v, want 7 given, 13", v)
	}
	if n := e.rdb.Exists(ctx, pk).Val(); n != 0 {
		t.Fatal("the refunded marker is left")
	}
}

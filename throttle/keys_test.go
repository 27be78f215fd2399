package throttle_test

import (
	"context"
	"encoding/base64"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

// TestTenantEncoding gives tenants with braces, colons, spaces, control
// bytes and UTF-8 (and plain tenants spelled like their encodings) each a
// different state, and checks that no tenant sees another's and that every
// key has exactly one hash tag.
func TestTenantEncoding(t *testing.T) {
	e := setup(t)
	const burst = 100
	l := newLimiter(t, e.rdb, e.prefix, 2*time.Minute, throttle.Limits{throttle.PerSecond(1, burst)})

	odd := []string{
		"a{b", "a}b", "{}", "{", "}", "}{", "{a}", "a:b", ":", "a b", " ", "tab\t", "nul\x00", "\x7f", "\xff",
		"ünïcødé", "日本語", "~abc", "~", "a~b", "a/b", "a*b", "a?b", "a\nb",
	}
	tenants := append([]string(nil), odd...)
	for _, o := range odd {
		enc := base64.RawURLEncoding.EncodeToString([]byte(o))
		// A plain tenant spelled like the encoding of another, with and
		// without the marker.
		tenants = append(tenants, "~"+enc, enc)
	}
	tenants = append(tenants, "plain", "UPPER-lower_1.2", "-", ".", "_")
	seen := map[string]bool{}
	var uniq []string
	for _, ten := range tenants {
		if !seen[ten] {
			seen[ten] = true
			uniq = append(uniq, ten)
		}
	}
	tenants = uniq
	if len(tenants) >= burst-1 {
		t.Fatalf("test set-up: %d tenants, want fewer than %d", len(tenants), burst-1)
	}

	// Tenant i takes i+1 tokens, then one more: its remaining tokens show
	// whether any other tenant's charge reached its bucket.
	for i, ten := range tenants {
		d := decide(t, l, throttle.Request{Tenant: ten, Cost: int64(i + 1), At: t0})
		sameDecision(t, "tenant "+strconv.Quote(ten)+" first job", d, admitted(int64(burst-i-1)))
	}
	for i, ten := range tenants {
		d := decide(t, l, throttle.Request{Tenant: ten, At: t0})
		sameDecision(t, "tenant "+strconv.Quote(ten)+" second job", d, admitted(int64(burst-i-2)))
	}
	// A job of the full burst then waits for exactly the tokens taken, and
	// holds a reservation under the tenant's tag.
	for i, ten := range tenants {
		d := decide(t, l, throttle.Request{Tenant: ten, JobID: "job-1", Cost: burst, At: t0})
		sameDecision(t, "tenant "+strconv.Quote(ten)+" full-burst job", d, reserved(time.Duration(i+2)*time.Second))
	}

	ks := keys(t, e.rdb, e.prefix)
	if len(ks) != 2*len(tenants) {
		t.Fatalf("%d keys for %d tenants, want one state and one reservation each", len(ks), len(tenants))
	}
	tags := map[string]int{}
	for _, k := range ks {
		checkHashTag(t, k)
		tags[k[strings.Index(k, "{"):strings.Index(k, "}")+1]]++
	}
	if len(tags) != len(tenants) {
		t.Fatalf("%d distinct hash tags for %d tenants", len(tags), len(tenants))
	}
	for tag, n := range tags {
		if n != 2 {
			t.Fatalf("hash tag %q on %d keys, want 2", tag, n)
		}
	}
}

// TestReservationKeyStaysInTenantSlot sends a job id full of braces: the
// reservation key must hash with its tenant, i.e. its first {...} must be
// the tenant's tag.
func TestReservationKeyStaysInTenantSlot(t *testing.T) {
	e := setup(t)
	l := newLimiter(t, e.rdb, e.prefix, time.Minute, throttle.Limits{throttle.PerSecond(1, 1)})
	decide(t, l, throttle.Request{Tenant: "acme", At: t0})
	d := decide(t, l, throttle.Request{Tenant: "acme", JobID: "}{x}{", At: t0})
	if d.Outcome != throttle.Reserved {
		t.Fatalf("job with braces: %+v, want Reserved", d)
	}
	for _, k := range keys(t, e.rdb, e.prefix) {
		open := strings.Index(k, "{")
		close := open + strings.Index(k[open:], "}")
		if tag := k[open+1 : close]; tag != "acme" {
			t.Fatalf("key %q hashes on %q, want the tenant acme", k, tag)
		}
	}
}

// TestNoLeaks makes decisions with short limits, including reservations
// whose jobs never come back, and checks that every key carries a TTL no
// longer than fill time + horizon and that all of them are gone once it
// has passed.
func TestNoLeaks(t *testing.T) {
	e := setup(t)
	horizon := 200 * ms
	single := throttle.Limits{throttle.PerSecond(1000, 5)}                                        // fills in 5ms
	multi := throttle.Limits{throttle.PerSecond(1000, 5), {Rate: 20, Period: 100 * ms, Burst: 5}} // fills in 5ms and 25ms
	l := newLimiter(t, e.rdb, e.prefix, horizon, single)
	ctx := context.Background()

	var reqs []throttle.Request
	var copies []throttle.Copy
	for ten := range 20 {
		tenant := "tenant-" + string(rune('a'+ten))
		var limits throttle.Limits
		if ten%2 == 1 {
			limits = multi
		}
		for k := range 40 {
			// Some jobs are moved copies whose owner is tracked: admitted,
			// they leave an owner key behind.
			req := throttle.Request{Tenant: tenant, JobID: "job-" + string(rune('A'+k)), Limits: limits}
			if k%2 == 0 {
				copies = append(copies, throttle.Copy{Request: req, Incarnation: 1})
				continue
			}
			reqs = append(reqs, req)
		}
		for range 10 {
			reqs = append(reqs, throttle.Request{Tenant: tenant, Limits: limits})
		}
	}
	var reserved int
	for _, r := range append(newEngine(t, l).DecideBatch(ctx, copies), l.DecideBatch(ctx, reqs)...) {
		if r.Err != nil {
			t.Fatalf("DecideBatch: %v", r.Err)
		}
		if r.Outcome == throttle.Reserved {
			reserved++
		}
	}
	ks := keys(t, e.rdb, e.prefix)
	if reserved == 0 || len(ks) <= 20 || !slices.ContainsFunc(ks, func(k string) bool { return strings.Contains(k, "}:o:") }) {
		t.Fatalf("%d reservations, keys %q: the test should leave state, reservations and owners behind", reserved, ks)
	}
	for _, k := range ks {
		checkHashTag(t, k)
		// PTTL is -1 for a key without TTL (a leak), -2 for a key gone.
		ttl, err := e.rdb.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatalf("PTTL %s: %v", k, err)
		}
		if ttl == -2 {
			continue // expired since KEYS: short limits refill in ms
		}
		// Odd tenants (b, d, ...) have the multi-limit set.
		fill := 5 * ms
		if letter := k[strings.Index(k, "{tenant-")+len("{tenant-")]; (letter-'a')%2 == 1 {
			fill = 25 * ms
		}
		// PX is whole milliseconds, rounded up: allow 1ms over here;
		// TestTTLWithinFillAndHorizon checks the exact bound.
		if ttl < 0 || ttl > horizon+fill+ms {
			t.Fatalf("key %s has PTTL %s, want within (0, fill %s + horizon %s]", k, ttl, fill, horizon)
		}
	}
	// The longest TTL is horizon + 25ms; let expiry happen, polling.
	testenv.Eventually(t, 5*time.Second, "every key to expire", func() bool { return len(keys(t, e.rdb, e.prefix)) == 0 })
}

// TestTTLWithinFillAndHorizon checks the exact TTL of the keys the script
// writes, read in the same pipeline so that no millisecond passes between:
// a state key lives until its bucket is full again, a reservation for at
// most horizon + fill time (lua/rules.lua: fullIn).
func TestTTLWithinFillAndHorizon(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	// 1000/s with a burst of 5 (fills in 5ms), horizon 200ms.
	args := func(now int64, cost string) []any {
		return []any{now, "200000", cost, "0", "0", "1", "1000", "1000000", "5"}
	}
	code, _, _, _, _ := throttle.Library()
	if err := e.rdb.FunctionLoadReplace(ctx, code).Err(); err != nil {
		t.Fatalf("FUNCTION LOAD: %v", err)
	}
	var worst [3]time.Duration
	for i := range 10 {
		state, resv := rawKeys(e.prefix, "ttl-"+string(rune('a'+i)), 1)
		now := t0.UnixMicro() + int64(i)
		pipe := e.rdb.Pipeline()
		// A full bucket gives all 5 tokens: full again in 5ms.
		first := pipe.FCall(ctx, decideFn(), state, args(now, "5")...)
		pttl1 := pipe.PTTL(ctx, state[0])
		// 5 more tokens reserved: empty in 5ms, full again in 10ms.
		second := pipe.FCall(ctx, decideFn(), append(state, resv), args(now, "5")...)
		pttl2 := pipe.PTTL(ctx, state[0])
		pttl3 := pipe.PTTL(ctx, resv)
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatalf("pipeline: %v", err)
		}
		if got, ok := first.Val().([]any); !ok || !reflect.DeepEqual(got, []any{int64(1), int64(0), int64(0), int64(0)}) {
			t.Fatalf("first call: reply %#v, want [1 0 0 0]", first.Val())
		}
		if got, ok := second.Val().([]any); !ok || !reflect.DeepEqual(got, []any{int64(2), int64(5000), int64(0), int64(3)}) {
			t.Fatalf("second call: reply %#v, want [2 5000 0 3]: a slot 5000µs away, reserved by its limit", second.Val())
		}
		for j, p := range []time.Duration{pttl1.Val(), pttl2.Val(), pttl3.Val()} {
			worst[j] = max(worst[j], p)
		}
	}
	t.Logf("largest PTTL: state after one charge %s, after the reservation %s, reservation %s", worst[0], worst[1], worst[2])
	if worst[0] > 5*ms || worst[1] > 10*ms || worst[2] > 205*ms {
		t.Fatalf("TTLs longer than needed: state %s (bucket full in 5ms), state %s (full in 10ms), reservation %s (horizon + fill = 205ms); "+
			"lua/rules.lua adds 1µs to an exact fill time before rounding up to ms", worst[0], worst[1], worst[2])
	}
}

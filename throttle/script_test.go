package throttle_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/throttle"
)

// The decide function's E_* codes, as in lua/head.lua.
const (
	eNow, eCost, eHorizon              = 2, 3, 4
	eRate, ePeriod, eBurst, eOverBurst = 6, 7, 8, 9
	eState, eStateTTL, eResv, eResvTTL = 10, 11, 12, 13
	eIncarnation, eOwner               = 14, 15
	eFresh                             = 17
)

// nowMicros is t0 in µs, as the function reads it.
var nowMicros = strconv.FormatInt(t0.UnixMicro(), 10)

// packedState is a bucket's state as the function stores it: its empty
// time, whole µs ei and remainder ef in units of 1/rate µs, and the rate
// it is stored for, as a little-endian int64 and two int32.
func packedState(ei int64, ef, rate int32) string {
	b := binary.LittleEndian.AppendUint64(nil, uint64(ei))
	b = binary.LittleEndian.AppendUint32(b, uint32(ef))
	return string(binary.LittleEndian.AppendUint32(b, uint32(rate)))
}

// validArgs is a valid ARGV of one job under one limit of 10/s with a
// burst of 5: now, horizon, cost, incarnation, fresh, count, rate, period,
// burst.
func validArgs() []string {
	return []string{nowMicros, "1000000", "1", "0", "0", "1", "10", "1000000", "5"}
}

// callRaw calls the decide function with FCALL, as any client could, and
// returns its reply as integers.
func callRaw(t *testing.T, rdb *redis.Client, keys []string, args []string) []int64 {
	t.Helper()
	return fcallRaw(t, rdb, decideFn(), keys, args)
}

// badCall fails t unless the decide function refuses keys and args whole,
// with a BADCALL error reply.
func badCall(t *testing.T, rdb *redis.Client, what string, keys []string, args []string) {
	t.Helper()
	if _, err := fcallErr(rdb, decideFn(), keys, args); err == nil || !strings.HasPrefix(err.Error(), "BADCALL") {
		t.Fatalf("%s: error %v, want BADCALL", what, err)
	}
}

// snapshot is the value and whether a TTL is set of every key given.
type snapshot map[string]string

func snap(t *testing.T, rdb *redis.Client, keys ...string) snapshot {
	t.Helper()
	ctx := context.Background()
	s := snapshot{}
	for _, k := range keys {
		v, err := rdb.Get(ctx, k).Result()
		switch {
		case errors.Is(err, redis.Nil):
			s[k] = "<none>"
			continue
		case err != nil:
			t.Fatalf("GET %s: %v", k, err)
		}
		ttl, err := rdb.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatalf("PTTL %s: %v", k, err)
		}
		s[k] = fmt.Sprintf("%q ttl=%v", v, ttl > 0)
	}
	return s
}

// rawKeys returns the state keys of L limits and a reservation key of the
// tenant name, in the engine's layout.
func rawKeys(prefix, name string, limits int) (state []string, resv string) {
	// The periods of the limits the tests send: 1 s, then 1 min, 1 h, ...
	periods := []int64{1_000_000, 60_000_000, 3_600_000_000, 86_400_000_000}
	for i := range limits {
		state = append(state, fmt.Sprintf("%s:{%s}:l:%d", prefix, name, periods[i]))
	}
	return state, fmt.Sprintf("%s:{%s}:j:job", prefix, name)
}

// ownerKey returns the owner key of the tenant name's job, in the engine's
// layout.
func ownerKey(prefix, name string) string { return fmt.Sprintf("%s:{%s}:o:job", prefix, name) }

// TestScriptRejectsBadArguments sends every class of invalid ARGV and KEYS
// straight to the decide function: a bad argument gets {3, code, index, 0},
// a call whose KEYS and ARGV do not fit together a BADCALL error, and
// nothing is written, neither on fresh keys nor over existing state.
func TestScriptRejectsBadArguments(t *testing.T) {
	e := setup(t)
	type tc struct {
		name      string
		keys      int // number of state keys; a reservation key is added
		args      []string
		code, idx int64
		owner     bool // add an owner key after the reservation key
		extra     int  // keys added after those: a shift key, then junk
		short     bool // the short form: state keys only
		bad       bool // refused whole: BADCALL
	}
	var cases []tc
	with := func(pos int, v string) []string {
		a := validArgs()
		a[pos-1] = v
		return a
	}
	notInts := []string{"1.5", "1e3", "-1", "", " 1", "1 ", "+1", "0x10", "99999999999999999999", "abc", "1_000", "١"}
	posCode := []struct {
		pos  int
		code int64
	}{{1, eNow}, {2, eHorizon}, {3, eCost}, {4, eIncarnation}, {5, eFresh}, {7, eRate}, {8, ePeriod}, {9, eBurst}}
	for _, pc := range posCode {
		for _, v := range notInts {
			cases = append(cases, tc{name: fmt.Sprintf("ARGV[%d]=%q", pc.pos, v), keys: 1, args: with(pc.pos, v), code: pc.code, idx: int64(pc.pos)})
			cases = append(cases, tc{name: fmt.Sprintf("ARGV[%d]=%q with an owner", pc.pos, v), keys: 1, args: with(pc.pos, v), code: pc.code, idx: int64(pc.pos), owner: true})
		}
	}
	outOfRange := []struct {
		pos       int
		v         string
		code, idx int64
	}{
		{1, "9007199254740992", eNow, 1},  // 2^53
		{2, "2592000000001", eHorizon, 2}, // 30 days + 1µs
		{3, "0", eCost, 3},
		{3, "1000000001", eCost, 3},
		{3, "6", eOverBurst, 9}, // cost > burst 5
		{4, "9007199254740992", eIncarnation, 4},
		{5, "4", eFresh, 5},
		{7, "0", eRate, 7},
		{7, "1000000001", eRate, 7},
		{8, "999", ePeriod, 8},
		{8, "31622400000001", ePeriod, 8}, // 366 days + 1µs
		{9, "0", eBurst, 9},
		{9, "1000000001", eBurst, 9},
	}
	for _, o := range outOfRange {
		cases = append(cases, tc{name: fmt.Sprintf("ARGV[%d]=%s", o.pos, o.v), keys: 1, args: with(o.pos, o.v), code: o.code, idx: o.idx})
	}
	// burst × period >= 2^53, far above and exactly at 2^53.
	cases = append(cases,
		tc{name: "burst×period>2^53", keys: 1, args: []string{nowMicros, "0", "1", "0", "0", "1", "1", "31622400000000", "285"}, code: eBurst, idx: 9},
		tc{name: "burst×period=2^53", keys: 1, args: []string{nowMicros, "0", "1", "0", "0", "1", "1", "33554432", "268435456"}, code: eBurst, idx: 9},
	)
	// The second limit is checked too, at its own positions.
	two := append(validArgs(), "20", "60000000", "5")
	two[5] = "2"
	for pos, code := range map[int]int64{10: eRate, 11: ePeriod, 12: eBurst} {
		a := slicesClone(two)
		a[pos-1] = "0"
		cases = append(cases, tc{name: fmt.Sprintf("second limit ARGV[%d]=0", pos), keys: 2, args: a, code: code, idx: int64(pos)})
	}
	a := slicesClone(two)
	a[11] = "3" // burst 3 < cost 4
	a[2] = "4"
	cases = append(cases, tc{name: "cost over the second burst", keys: 2, args: a, code: eOverBurst, idx: 12})
	// The short form: now, cost, rate, period, burst, under its state key
	// alone.
	shortArgs := func(pos int, v string) []string {
		a := []string{nowMicros, "1", "10", "1000000", "5"}
		a[pos-1] = v
		return a
	}
	for pos, code := range map[int]int64{1: eNow, 2: eCost, 3: eRate, 4: ePeriod, 5: eBurst} {
		for _, v := range notInts {
			cases = append(cases, tc{name: fmt.Sprintf("short form ARGV[%d]=%q", pos, v), keys: 1, args: shortArgs(pos, v), code: code, idx: int64(pos), short: true})
		}
	}
	for _, o := range []struct {
		pos       int
		v         string
		code, idx int64
	}{
		{1, "9007199254740992", eNow, 1},
		{2, "0", eCost, 2},
		{2, "6", eOverBurst, 5},
		{3, "0", eRate, 3},
		{3, "1000000001", eRate, 3},
		{4, "999", ePeriod, 4},
		{5, "0", eBurst, 5},
		{5, "1000000001", eBurst, 5},
	} {
		cases = append(cases, tc{name: fmt.Sprintf("short form ARGV[%d]=%s", o.pos, o.v), keys: 1, args: shortArgs(o.pos, o.v), code: o.code, idx: o.idx, short: true})
	}
	cases = append(cases, tc{name: "short form burst×period=2^53", keys: 1, args: []string{nowMicros, "1", "1", "33554432", "268435456"}, code: eBurst, idx: 5, short: true})
	// KEYS and ARGV that do not fit together: refused whole.
	for _, v := range append(notInts, "0", "9") {
		cases = append(cases, tc{name: fmt.Sprintf("count %q", v), keys: 1, args: with(6, v), bad: true})
	}
	cases = append(cases,
		tc{name: "short form under two state keys", keys: 2, args: shortArgs(1, nowMicros), short: true, bad: true},
		tc{name: "short form without KEYS", args: shortArgs(1, nowMicros), short: true, bad: true},
		tc{name: "short form with a reservation key", keys: 1, args: shortArgs(1, nowMicros), bad: true},
		tc{name: "ARGV one limit short", keys: 2, args: append(validArgs()[:5], "2", "10", "1000000", "5"), bad: true},
		tc{name: "ARGV three values long", keys: 1, args: append(validArgs(), "1", "1", "1"), bad: true},
		tc{name: "ARGV one value short", keys: 1, args: validArgs()[:8], bad: true},
		tc{name: "ARGV header only", keys: 1, args: validArgs()[:2], bad: true},
		tc{name: "ARGV empty", keys: 1, bad: true},
		tc{name: "no KEYS", args: validArgs(), bad: true},
		tc{name: "KEYS two limits for one", keys: 2, args: validArgs(), owner: true, extra: 1, bad: true},
		tc{name: "KEYS one too many", keys: 1, args: validArgs(), owner: true, extra: 2, bad: true},
	)

	// run sends case c over the keys of tenant name (or existing state).
	run := func(c tc, state []string, resv, owner string) {
		t.Helper()
		keys := slicesClone(state[:min(c.keys, len(state))])
		if !c.short && c.keys > 0 {
			keys = append(keys, resv)
		}
		if c.owner {
			keys = append(keys, owner)
		}
		for i := range c.extra {
			keys = append(keys, resv+"-extra"+strconv.Itoa(i))
		}
		if c.bad {
			badCall(t, e.rdb, c.name, keys, c.args)
			return
		}
		if got, want := callRaw(t, e.rdb, keys, c.args), []int64{3, c.code, c.idx, 0}; !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: reply %v, want %v", c.name, got, want)
		}
	}
	for i, c := range cases {
		// Fresh keys: nothing may be created.
		name := "fresh-" + strconv.Itoa(i)
		state, resv := rawKeys(e.prefix, name, max(c.keys, 1))
		run(c, state, resv, ownerKey(e.prefix, name))
		if ks := tenantKeys(t, e, name); len(ks) != 0 {
			t.Fatalf("%s: invalid call wrote %q", c.name, ks)
		}
	}

	// Existing state: a valid call charges 3 tokens of each limit, then
	// every invalid call must leave it exactly as it was.
	state, resv := rawKeys(e.prefix, "existing", 2)
	valid := slicesClone(two)
	valid[2] = "3"
	if got := callRaw(t, e.rdb, state, valid); !reflect.DeepEqual(got, []int64{1, 0, 2, 0}) {
		t.Fatalf("valid call: reply %v, want [1 0 2 0]", got)
	}
	owner := ownerKey(e.prefix, "existing")
	if err := e.rdb.Set(context.Background(), owner, "0", time.Minute).Err(); err != nil {
		t.Fatalf("SET %s: %v", owner, err)
	}
	// The calls take longer than the bucket takes to refill (300ms): keep
	// its state meanwhile.
	for _, k := range state {
		if err := e.rdb.PExpire(context.Background(), k, time.Minute).Err(); err != nil {
			t.Fatalf("PEXPIRE %s: %v", k, err)
		}
	}
	before := snap(t, e.rdb, append(slicesClone(state), resv, owner)...)
	for _, c := range cases {
		run(c, state, resv, owner)
	}
	if after := snap(t, e.rdb, append(slicesClone(state), resv, owner)...); !reflect.DeepEqual(after, before) {
		t.Fatalf("invalid calls changed existing state: before %v, after %v", before, after)
	}
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

// tenantKeys returns the keys of the tenant name under e's prefix.
func tenantKeys(t *testing.T, e env, name string) []string {
	t.Helper()
	return keys(t, e.rdb, e.prefix+":{"+name+"}")
}

// TestScriptRejectsBadState stores malformed state and reservations, and
// state without a TTL: the script refuses with the right code and index
// and writes nothing, and the Go API reports the same as ErrInvalid.
func TestScriptRejectsBadState(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	l := newLimiter(t, e.rdb, e.prefix, time.Second, throttle.Limits{throttle.PerSecond(10, 5)})
	// The engine's key for the tenant's limit of 10/s, as the script sees it.
	now := t0.UnixMicro()
	valid := packedState(now, 0, 10)

	type tc struct {
		name      string
		state     []string // value of each state key; "" for none
		noTTL     int      // 1-based index of the state key stored without TTL; 0 for none
		resv      string   // value of the reservation; "" for none
		resvTTL   bool
		code, idx int64
	}
	cases := []tc{
		{"state abc", []string{"abc"}, 0, "", false, eState, 1},
		{"state 1:", []string{"1:"}, 0, "", false, eState, 1},
		{"state :1", []string{":1"}, 0, "", false, eState, 1},
		{"state 1", []string{"1"}, 0, "", false, eState, 1},
		{"state 1:2:3", []string{"1:2:3"}, 0, "", false, eState, 1},
		{"state -1:0", []string{"-1:0"}, 0, "", false, eState, 1},
		{"state 1.5:0", []string{"1.5:0"}, 0, "", false, eState, 1},
		{"state as text", []string{nowMicros + ":0"}, 0, "", false, eState, 1},
		{"state empty", []string{"<empty>"}, 0, "", false, eState, 1},
		{"state 11 bytes", []string{valid[:11]}, 0, "", false, eState, 1},
		{"state 13 bytes", []string{valid + "x"}, 0, "", false, eState, 1},
		{"state 12 bytes, as before live limits", []string{valid[:12]}, 0, "", false, eState, 1},
		{"negative empty time", []string{packedState(-1, 0, 10)}, 0, "", false, eState, 1},
		{"negative remainder", []string{packedState(now, -1, 10)}, 0, "", false, eState, 1},
		{"remainder = rate", []string{packedState(now, 10, 10)}, 0, "", false, eState, 1},
		{"remainder > rate", []string{packedState(now, 11, 10)}, 0, "", false, eState, 1},
		{"remainder = its own rate", []string{packedState(now, 20, 20)}, 0, "", false, eState, 1},
		{"rate 0", []string{packedState(now, 0, 0)}, 0, "", false, eState, 1},
		{"rate -1", []string{packedState(now, 0, -1)}, 0, "", false, eState, 1},
		{"rate over 1e9", []string{packedState(now, 0, 1_000_000_001)}, 0, "", false, eState, 1},
		{"far future", []string{packedState(now+31*24*3600*1_000_000, 0, 10)}, 0, "", false, eState, 1},
		{"huge", []string{packedState(math.MaxInt64, 0, 10)}, 0, "", false, eState, 1},
		{"huge, of another rate", []string{packedState(math.MaxInt64, 0, 20)}, 0, "", false, eState, 1},
		{"second state malformed", []string{valid, "x:y"}, 0, "", false, eState, 2},
		{"state without TTL", []string{valid}, 1, "", false, eStateTTL, 1},
		{"second state without TTL", []string{valid, valid}, 2, "", false, eStateTTL, 2},
		{"reservation abc", []string{""}, 0, "abc", true, eResv, 2},
		{"reservation 1.5", []string{""}, 0, "1.5", true, eResv, 2},
		{"reservation -1", []string{""}, 0, "-1", true, eResv, 2},
		{"reservation empty", []string{""}, 0, "<empty>", true, eResv, 2},
		{"reservation 17 digits", []string{""}, 0, "12345678901234567", true, eResv, 2},
		{"reservation over valid state", []string{valid}, 0, "x", true, eResv, 2},
		{"reservation without TTL", []string{""}, 0, nowMicros, false, eResvTTL, 2},
		{"reservation of two limits without TTL", []string{"", ""}, 0, nowMicros, false, eResvTTL, 3},
		{"owner abc", []string{""}, 0, "", false, eOwner, 3},
		{"owner -1", []string{""}, 0, "", false, eOwner, 3},
		{"owner 1.5", []string{""}, 0, "", false, eOwner, 3},
		{"owner empty", []string{""}, 0, "", false, eOwner, 3},
		{"owner 17 digits", []string{""}, 0, "", false, eOwner, 3},
		{"owner of two limits", []string{"", ""}, 0, "", false, eOwner, 4},
	}
	ownerValue := map[string]string{"owner abc": "abc", "owner -1": "-1", "owner 1.5": "1.5", "owner empty": "<empty>",
		"owner 17 digits": "12345678901234567", "owner of two limits": "x"}
	for i, c := range cases {
		name := "bad-" + strconv.Itoa(i)
		state, resv := rawKeys(e.prefix, name, len(c.state))
		set := func(k, v string, ttl bool) {
			t.Helper()
			if v == "" {
				return
			}
			if v == "<empty>" {
				v = ""
			}
			exp := time.Duration(0)
			if ttl {
				exp = time.Minute
			}
			if err := e.rdb.Set(ctx, k, v, exp).Err(); err != nil {
				t.Fatalf("%s: SET %s: %v", c.name, k, err)
			}
		}
		for j, v := range c.state {
			set(state[j], v, c.noTTL != j+1)
		}
		set(resv, c.resv, c.resvTTL)
		args := validArgs()
		if len(c.state) == 2 {
			args = append(args, "20", "60000000", "5")
			args[5] = "2"
		}
		all := append(slicesClone(state), resv)
		if v, ok := ownerValue[c.name]; ok {
			owner := ownerKey(e.prefix, name)
			set(owner, v, true)
			all = append(all, owner)
		}
		before := snap(t, e.rdb, all...)
		if got, want := callRaw(t, e.rdb, all, args), []int64{3, c.code, c.idx, 0}; !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: reply %v, want %v", c.name, got, want)
		}
		if after := snap(t, e.rdb, all...); !reflect.DeepEqual(after, before) {
			t.Fatalf("%s: the refused call wrote: before %v, after %v", c.name, before, after)
		}
		if len(c.state) == 1 && c.resv == "" && !c.resvTTL && ownerValue[c.name] == "" {
			// The short form (no job id) reads the state the same way.
			short := []string{nowMicros, "1", "10", "1000000", "5"}
			if got, want := callRaw(t, e.rdb, state, short), []int64{3, c.code, c.idx, 0}; !reflect.DeepEqual(got, want) {
				t.Fatalf("%s, short form: reply %v, want %v", c.name, got, want)
			}
			if after := snap(t, e.rdb, all...); !reflect.DeepEqual(after, before) {
				t.Fatalf("%s, short form: the refused call wrote: before %v, after %v", c.name, before, after)
			}
		}
	}

	// Through the Go API: the tenant's state key is malformed.
	if err := e.rdb.Set(ctx, e.prefix+":{acme}:l:1000000", "1:2:3", time.Minute).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	_, err := l.Decide(ctx, throttle.Request{Tenant: "acme", JobID: "j1", At: t0})
	var inv *throttle.InvalidError
	if !errors.Is(err, throttle.ErrInvalid) || errors.Is(err, throttle.ErrRedis) || !errors.As(err, &inv) ||
		inv.Code != throttle.CodeState || inv.Index != 1 {
		t.Fatalf("Decide over malformed state: error %v, want an InvalidError with CodeState at 1", err)
	}
	if n := len(keys(t, e.rdb, e.prefix+":{acme}:j:")); n != 0 {
		t.Fatalf("Decide over malformed state wrote a reservation")
	}
	// And a reservation without TTL.
	if err := e.rdb.Set(ctx, e.prefix+":{globex}:j:j1", nowMicros, 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	_, err = l.Decide(ctx, throttle.Request{Tenant: "globex", JobID: "j1", At: t0})
	if !errors.As(err, &inv) || inv.Code != throttle.CodeReservationTTL || inv.Index != 2 {
		t.Fatalf("Decide over a reservation without TTL: error %v, want an InvalidError with CodeReservationTTL at 2", err)
	}
	if n := len(keys(t, e.rdb, e.prefix+":{globex}:l:")); n != 0 {
		t.Fatalf("Decide over a reservation without TTL wrote state")
	}
}

// countingHook counts the commands a client sends, pipelined or not.
type countingHook struct{ n atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestInvalidRequests checks that the Go API refuses bad requests with
// ErrInvalid and the right code before any round trip.
func TestInvalidRequests(t *testing.T) {
	e := setup(t)
	rdb := e.srv.Client(t)
	hook := &countingHook{}
	rdb.AddHook(hook)
	l := newLimiter(t, rdb, e.prefix, time.Second, throttle.Limits{throttle.PerSecond(10, 5), throttle.PerMinute(100, 20)})
	ctx := context.Background()

	cases := []struct {
		name string
		req  throttle.Request
		code throttle.Code
	}{
		{"empty tenant", throttle.Request{}, throttle.CodeTenant},
		{"tenant of MaxTenantLen+1 bytes", throttle.Request{Tenant: strings.Repeat("a", throttle.MaxTenantLen+1)}, throttle.CodeTenant},
		{"tenant of 129 two-byte runes", throttle.Request{Tenant: strings.Repeat("é", 129)}, throttle.CodeTenant},
		{"negative cost", throttle.Request{Tenant: "a", Cost: -1}, throttle.CodeCost},
		{"cost over 1e9", throttle.Request{Tenant: "a", Cost: 1_000_000_001}, throttle.CodeCost},
		{"cost over the smallest burst", throttle.Request{Tenant: "a", Cost: 6}, throttle.CodeCostOverBurst},
		{"time at the epoch", throttle.Request{Tenant: "a", At: time.Unix(0, 0)}, throttle.CodeNow},
		{"time before the epoch", throttle.Request{Tenant: "a", At: time.Unix(-5, 0)}, throttle.CodeNow},
		{"time past 2^53 µs", throttle.Request{Tenant: "a", At: time.UnixMicro(1 << 53)}, throttle.CodeNow},
		{"job id with a space", throttle.Request{Tenant: "a", JobID: "job 1"}, throttle.CodeJobID},
		{"job id with a control byte", throttle.Request{Tenant: "a", JobID: "job\n1"}, throttle.CodeJobID},
		{"job id not ASCII", throttle.Request{Tenant: "a", JobID: "jöb"}, throttle.CodeJobID},
		{"job id of 129 bytes", throttle.Request{Tenant: "a", JobID: strings.Repeat("j", 129)}, throttle.CodeJobID},
		{"invalid limit", throttle.Request{Tenant: "a", Limits: throttle.Limits{{Rate: 0, Period: time.Second, Burst: 1}}}, throttle.CodeLimits},
		{"duplicate limits", throttle.Request{Tenant: "a", Limits: throttle.Limits{throttle.PerSecond(1, 1), throttle.PerSecond(1, 2)}}, throttle.CodeLimits},
		{"nine limits", throttle.Request{Tenant: "a", Limits: throttle.Limits{
			throttle.PerSecond(1, 1), throttle.PerSecond(2, 1), throttle.PerSecond(3, 1), throttle.PerSecond(4, 1), throttle.PerSecond(5, 1),
			throttle.PerSecond(6, 1), throttle.PerSecond(7, 1), throttle.PerSecond(8, 1), throttle.PerSecond(9, 1)}}, throttle.CodeLimits},
	}
	var reqs []throttle.Request
	for _, c := range cases {
		_, err := l.Decide(ctx, c.req)
		var inv *throttle.InvalidError
		if !errors.Is(err, throttle.ErrInvalid) || errors.Is(err, throttle.ErrRedis) || !errors.As(err, &inv) || inv.Code != c.code {
			t.Fatalf("%s: error %v, want an InvalidError with code %d (%s)", c.name, err, c.code, c.code)
		}
		reqs = append(reqs, c.req)
	}
	for i, r := range l.DecideBatch(ctx, reqs) {
		var inv *throttle.InvalidError
		if !errors.As(r.Err, &inv) || inv.Code != cases[i].code {
			t.Fatalf("DecideBatch, %s: error %v, want an InvalidError with code %d", cases[i].name, r.Err, cases[i].code)
		}
	}
	// A Decider refuses what a Limiter refuses, and a copy without a job
	// id or with an incarnation out of range.
	c := newEngine(t, l)
	copies := []struct {
		name string
		cp   throttle.Copy
		code throttle.Code
	}{
		{"copy without a job id", throttle.Copy{Request: throttle.Request{Tenant: "a"}}, throttle.CodeJobID},
		{"negative incarnation", throttle.Copy{Request: throttle.Request{Tenant: "a", JobID: "j"}, Incarnation: -1}, throttle.CodeIncarnation},
		{"incarnation of 2^53", throttle.Copy{Request: throttle.Request{Tenant: "a", JobID: "j"}, Incarnation: 1 << 53}, throttle.CodeIncarnation},
		{"copy with an empty tenant", throttle.Copy{Request: throttle.Request{JobID: "j"}}, throttle.CodeTenant},
		{"copy over its burst", throttle.Copy{Request: throttle.Request{Tenant: "a", JobID: "j", Cost: 6}}, throttle.CodeCostOverBurst},
	}
	var cps []throttle.Copy
	for _, cc := range copies {
		_, err := c.Decide(ctx, cc.cp)
		var inv *throttle.InvalidError
		if !errors.As(err, &inv) || inv.Code != cc.code || errors.Is(err, throttle.ErrRedis) {
			t.Fatalf("%s: error %v, want an InvalidError with code %d (%s)", cc.name, err, cc.code, cc.code)
		}
		cps = append(cps, cc.cp)
	}
	for i, r := range c.DecideBatch(ctx, cps) {
		var inv *throttle.InvalidError
		if !errors.As(r.Err, &inv) || inv.Code != copies[i].code {
			t.Fatalf("Decider.DecideBatch, %s: error %v, want code %d", copies[i].name, r.Err, copies[i].code)
		}
	}
	if n := hook.n.Load(); n != 0 {
		t.Fatalf("invalid requests sent %d commands to Redis, want none", n)
	}
	if ks := keys(t, e.rdb, e.prefix); len(ks) != 0 {
		t.Fatalf("invalid requests wrote %q", ks)
	}

	// The limits of the boundaries are accepted (and do reach Redis).
	for _, req := range []throttle.Request{
		{Tenant: strings.Repeat("a", throttle.MaxTenantLen), At: t0},
		{Tenant: strings.Repeat("é", throttle.MaxTenantLen/2), At: t0},
		{Tenant: "a", JobID: strings.Repeat("j", 128), At: t0},
		{Tenant: "a", JobID: "!~{}:", At: t0},
		{Tenant: "a", Cost: 5, At: t0.Add(time.Hour)},
		{Tenant: "a", At: time.UnixMicro(1<<53 - 1)},
	} {
		decide(t, l, req)
	}
	if hook.n.Load() == 0 {
		t.Fatalf("valid requests sent no command")
	}
}

// TestWrongTypeIsRedisError puts a list where the engine keeps a string:
// Redis' WRONGTYPE error reaches the caller as ErrRedis, not ErrInvalid.
func TestWrongTypeIsRedisError(t *testing.T) {
	e := setup(t)
	l := newLimiter(t, e.rdb, e.prefix, time.Second, throttle.Limits{throttle.PerSecond(10, 5)})
	ctx := context.Background()
	for _, key := range []string{e.prefix + ":{acme}:l:1000000", e.prefix + ":{globex}:j:j1"} {
		if err := e.rdb.LPush(ctx, key, "x").Err(); err != nil {
			t.Fatalf("LPUSH %s: %v", key, err)
		}
	}
	check := func(what string, err error) {
		t.Helper()
		var rerr *throttle.RedisError
		if !errors.Is(err, throttle.ErrRedis) || errors.Is(err, throttle.ErrInvalid) || !errors.As(err, &rerr) ||
			!strings.Contains(rerr.Error(), "WRONGTYPE") {
			t.Fatalf("%s: error %v, want a *RedisError matching ErrRedis only and mentioning WRONGTYPE", what, err)
		}
	}
	_, err := l.Decide(ctx, throttle.Request{Tenant: "acme", At: t0})
	check("Decide on a list state key", err)
	_, err = l.Decide(ctx, throttle.Request{Tenant: "globex", JobID: "j1", At: t0})
	check("Decide on a list reservation key", err)
	rs := l.DecideBatch(ctx, []throttle.Request{
		{Tenant: "acme", At: t0},
		{Tenant: "ok", At: t0},
		{Tenant: "globex", JobID: "j1", At: t0},
	})
	check("DecideBatch on a list state key", rs[0].Err)
	check("DecideBatch on a list reservation key", rs[2].Err)
	if rs[1].Err != nil || rs[1].Outcome != throttle.Admitted {
		t.Fatalf("DecideBatch: the valid request between two failing ones: %+v", rs[1])
	}
	// Nothing was written for the failing requests: the raised error came
	// before any write.
	if ks := keys(t, e.rdb, e.prefix+":{globex}:l:"); len(ks) != 0 {
		t.Fatalf("a failing call wrote %q", ks)
	}
}

// TestScriptRejectsOwnerWithoutTTL stores a job's owner key without a TTL.
// Like state and reservations without TTL, the script must refuse it
// (INVALID, nothing written): an owner that never expires would make every
// other incarnation of the job a duplicate forever.
func TestScriptRejectsOwnerWithoutTTL(t *testing.T) {
	e := setup(t)
	state, resv := rawKeys(e.prefix, "acme", 1)
	owner := ownerKey(e.prefix, "acme")
	if err := e.rdb.Set(context.Background(), owner, "0", 0).Err(); err != nil {
		t.Fatalf("SET %s: %v", owner, err)
	}
	all := append(slicesClone(state), resv, owner)
	for _, inc := range []string{"0", "1"} {
		before := snap(t, e.rdb, all...)
		args := validArgs()
		args[3] = inc
		got := callRaw(t, e.rdb, all, args)
		if after := snap(t, e.rdb, all...); !reflect.DeepEqual(after, before) {
			t.Fatalf("incarnation %s: the call wrote: before %v, after %v", inc, before, after)
		}
		if want := []int64{3, 16, 3, 0}; !reflect.DeepEqual(got, want) {
			t.Fatalf("incarnation %s over an owner key without TTL: reply %v, want %v", inc, got, want)
		}
	}
}

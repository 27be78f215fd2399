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

	"github.com/throttler/throttler/lua"
	"github.com/throttler/throttler/throttle"
)

// The script's E_* codes, as in lua/throttle.lua.
const (
	eKeys, eNow, eCost, eHorizon, eCount = 1, 2, 3, 4, 5
	eRate, ePeriod, eBurst, eOverBurst   = 6, 7, 8, 9
	eState, eStateTTL, eResv, eResvTTL   = 10, 11, 12, 13
	eIncarnation, eOwner                 = 14, 15
	eFresh                               = 17
)

// nowMicros is t0 in µs, as the script reads it.
var nowMicros = strconv.FormatInt(t0.UnixMicro(), 10)

// packedState is a bucket's state as the script stores it: its empty time,
// whole µs ei and remainder ef, as a little-endian int64 and int32.
func packedState(ei int64, ef int32) string {
	b := binary.LittleEndian.AppendUint64(nil, uint64(ei))
	return string(binary.LittleEndian.AppendUint32(b, uint32(ef)))
}

// validArgs is a valid ARGV for one limit of 10/s with a burst of 5:
// now, cost, horizon, count, rate, period, burst.
func validArgs() []string {
	return []string{nowMicros, "1", "1000000", "1", "10", "1000000", "5"}
}

// evalRaw runs the script with EVAL, as any client could, and returns its
// reply as integers.
func evalRaw(t *testing.T, rdb *redis.Client, keys []string, args []string) []int64 {
	t.Helper()
	argv := make([]any, len(args))
	for i, a := range args {
		argv[i] = a
	}
	v, err := rdb.Eval(context.Background(), lua.Throttle, keys, argv...).Result()
	if err != nil {
		t.Fatalf("EVAL keys %q args %q: %v", keys, args, err)
	}
	arr, ok := v.([]any)
	if !ok {
		t.Fatalf("EVAL keys %q args %q: reply %#v, want an array", keys, args, v)
	}
	out := make([]int64, len(arr))
	for i, e := range arr {
		n, ok := e.(int64)
		if !ok {
			t.Fatalf("EVAL keys %q args %q: reply element %d is %#v, want an integer", keys, args, i, e)
		}
		out[i] = n
	}
	return out
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
	for i := range limits {
		state = append(state, fmt.Sprintf("%s:{%s}:l:%d:1000000", prefix, name, 10+i))
	}
	return state, fmt.Sprintf("%s:{%s}:j:job", prefix, name)
}

// ownerKey returns the owner key of the tenant name's job, in the engine's
// layout.
func ownerKey(prefix, name string) string { return fmt.Sprintf("%s:{%s}:o:job", prefix, name) }

// TestScriptRejectsBadArguments sends every class of invalid ARGV and KEYS
// straight to the script: each gets {3, code, index}, and nothing is written,
// neither on fresh keys nor over existing state.
func TestScriptRejectsBadArguments(t *testing.T) {
	e := setup(t)
	type tc struct {
		name      string
		keys      int // number of state keys; a reservation key is added
		args      []string
		code, idx int64
		owner     bool // add an owner key after the reservation key
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
	}{{1, eNow}, {2, eCost}, {3, eHorizon}, {4, eCount}, {5, eRate}, {6, ePeriod}, {7, eBurst}}
	for _, pc := range posCode {
		for _, v := range notInts {
			cases = append(cases, tc{fmt.Sprintf("ARGV[%d]=%q", pc.pos, v), 1, with(pc.pos, v), pc.code, int64(pc.pos), false})
		}
	}
	outOfRange := []struct {
		pos       int
		v         string
		code, idx int64
	}{
		{1, "9007199254740992", eNow, 1}, // 2^53
		{2, "0", eCost, 2},
		{2, "1000000001", eCost, 2},
		{2, "6", eOverBurst, 7},           // cost > burst 5
		{3, "2592000000001", eHorizon, 3}, // 30 days + 1µs
		{4, "0", eCount, 4},
		{4, "9", eCount, 4},
		{5, "0", eRate, 5},
		{5, "1000000001", eRate, 5},
		{6, "999", ePeriod, 6},
		{6, "31622400000001", ePeriod, 6}, // 366 days + 1µs
		{7, "0", eBurst, 7},
		{7, "1000000001", eBurst, 7},
	}
	for _, o := range outOfRange {
		cases = append(cases, tc{fmt.Sprintf("ARGV[%d]=%s", o.pos, o.v), 1, with(o.pos, o.v), o.code, o.idx, false})
	}
	// burst × period >= 2^53, far above and exactly at 2^53.
	cases = append(cases,
		tc{"burst×period>2^53", 1, []string{nowMicros, "1", "0", "1", "1", "31622400000000", "285"}, eBurst, 7, false},
		tc{"burst×period=2^53", 1, []string{nowMicros, "1", "0", "1", "1", "33554432", "268435456"}, eBurst, 7, false},
	)
	// The second limit is checked too, at its own positions.
	two := append(validArgs(), "20", "60000000", "5")
	two[3] = "2"
	for pos, code := range map[int]int64{8: eRate, 9: ePeriod, 10: eBurst} {
		a := slicesClone(two)
		a[pos-1] = "0"
		cases = append(cases, tc{fmt.Sprintf("second limit ARGV[%d]=0", pos), 2, a, code, int64(pos), false})
	}
	a := slicesClone(two)
	a[9] = "3" // burst 3 < cost 4
	a[1] = "4"
	cases = append(cases, tc{"cost over the second burst", 2, a, eOverBurst, 10, false})
	// The optional incarnation after the limits.
	for _, v := range append(notInts, "9007199254740992") { // 2^53
		cases = append(cases, tc{fmt.Sprintf("incarnation %q", v), 1, append(validArgs(), v), eIncarnation, 8, true})
		cases = append(cases, tc{fmt.Sprintf("incarnation %q after two limits", v), 2, append(slicesClone(two), v), eIncarnation, 11, true})
	}
	// The optional fresh flag after the incarnation: 0 or 1.
	for _, v := range append(notInts, "2") {
		cases = append(cases, tc{fmt.Sprintf("fresh %q", v), 1, append(validArgs(), "0", v), eFresh, 9, false})
		cases = append(cases, tc{fmt.Sprintf("fresh %q after two limits", v), 2, append(slicesClone(two), "0", v), eFresh, 12, true})
	}
	// The short form: now, cost, rate, period, burst, under its state keys
	// alone (short).
	var short []tc
	shortArgs := func(pos int, v string) []string {
		a := []string{nowMicros, "1", "10", "1000000", "5"}
		a[pos-1] = v
		return a
	}
	for pos, code := range map[int]int64{1: eNow, 2: eCost, 3: eRate, 4: ePeriod, 5: eBurst} {
		for _, v := range notInts {
			short = append(short, tc{fmt.Sprintf("short form ARGV[%d]=%q", pos, v), 1, shortArgs(pos, v), code, int64(pos), false})
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
		short = append(short, tc{fmt.Sprintf("short form ARGV[%d]=%s", o.pos, o.v), 1, shortArgs(o.pos, o.v), o.code, o.idx, false})
	}
	short = append(short,
		tc{"short form burst×period=2^53", 1, []string{nowMicros, "1", "1", "33554432", "268435456"}, eBurst, 5, false},
		tc{"short form under two state keys", 2, shortArgs(1, nowMicros), eKeys, 0, false},
		tc{"short form without KEYS", 0, shortArgs(1, nowMicros), eKeys, 0, false},
	)
	// Every long-form case has a reservation key; a short form given one is
	// refused too.
	cases = append(cases, tc{"short form with a reservation key", 1, shortArgs(1, nowMicros), eKeys, 0, false})
	// ARGV and KEYS that do not fit together.
	cases = append(cases,
		tc{"ARGV one limit short", 2, append(validArgs()[:3], "2", "10", "1000000", "5"), eKeys, 0, false},
		tc{"ARGV three values long", 1, append(validArgs(), "1", "1", "1"), eKeys, 0, false},
		tc{"ARGV four values long", 1, append(validArgs(), "0", "0", "1", "1"), eKeys, 0, false},
		tc{"ARGV one value short", 1, validArgs()[:6], eKeys, 0, false},
		tc{"ARGV count only", 1, validArgs()[:4], eKeys, 0, false},
		tc{"ARGV empty", 1, nil, eCount, 4, false},
		tc{"no KEYS", 0, validArgs(), eKeys, 0, false},
		tc{"KEYS two limits for one", 2, validArgs(), eKeys, 0, false},
		tc{"owner key without incarnation", 1, validArgs(), eKeys, 0, true},
		tc{"KEYS one too many with incarnation", 2, append(validArgs(), "0"), eKeys, 0, true},
	)

	cases = append(cases, short...)
	for i, c := range cases {
		// Fresh keys: nothing may be created.
		state, resv := rawKeys(e.prefix, "fresh-"+strconv.Itoa(i), c.keys)
		keys := append(slicesClone(state), resv)
		if i >= len(cases)-len(short) {
			keys = state
		}
		if c.owner {
			keys = append(keys, ownerKey(e.prefix, "fresh-"+strconv.Itoa(i)))
		}
		if c.keys == 0 {
			keys = nil
		}
		got := evalRaw(t, e.rdb, keys, c.args)
		if want := []int64{3, c.code, c.idx}; !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: reply %v, want %v", c.name, got, want)
		}
		if ks := tenantKeys(t, e, "fresh-"+strconv.Itoa(i)); len(ks) != 0 {
			t.Fatalf("%s: invalid call wrote %q", c.name, ks)
		}
	}

	// Existing state: a valid call charges 3 tokens of each limit, then
	// every invalid call must leave it exactly as it was.
	state, resv := rawKeys(e.prefix, "existing", 2)
	valid := slicesClone(two)
	valid[1] = "3"
	if got := evalRaw(t, e.rdb, state, valid); !reflect.DeepEqual(got, []int64{1, 0, 2, 0}) {
		t.Fatalf("valid call: reply %v, want [1 0 2 0]", got)
	}
	owner := ownerKey(e.prefix, "existing")
	if err := e.rdb.Set(context.Background(), owner, "0", time.Minute).Err(); err != nil {
		t.Fatalf("SET %s: %v", owner, err)
	}
	before := snap(t, e.rdb, append(slicesClone(state), resv, owner)...)
	for i, c := range cases {
		if c.keys == 0 {
			continue
		}
		keys := append(slicesClone(state[:c.keys]), resv)
		if i >= len(cases)-len(short) {
			keys = state[:c.keys]
		}
		if c.owner {
			keys = append(keys, owner)
		}
		if got, want := evalRaw(t, e.rdb, keys, c.args), []int64{3, c.code, c.idx}; !reflect.DeepEqual(got, want) {
			t.Fatalf("%s over existing state: reply %v, want %v", c.name, got, want)
		}
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
	valid := packedState(now, 0)

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
		{"negative empty time", []string{packedState(-1, 0)}, 0, "", false, eState, 1},
		{"negative remainder", []string{packedState(now, -1)}, 0, "", false, eState, 1},
		{"remainder = rate", []string{packedState(now, 10)}, 0, "", false, eState, 1},
		{"remainder > rate", []string{packedState(now, 11)}, 0, "", false, eState, 1},
		{"far future", []string{packedState(now+31*24*3600*1_000_000, 0)}, 0, "", false, eState, 1},
		{"huge", []string{packedState(math.MaxInt64, 0)}, 0, "", false, eState, 1},
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
			args[3] = "2"
		}
		all := append(slicesClone(state), resv)
		if v, ok := ownerValue[c.name]; ok {
			owner := ownerKey(e.prefix, name)
			set(owner, v, true)
			all = append(all, owner)
			args = append(args, "0")
		}
		before := snap(t, e.rdb, all...)
		if got, want := evalRaw(t, e.rdb, all, args), []int64{3, c.code, c.idx}; !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: reply %v, want %v", c.name, got, want)
		}
		if after := snap(t, e.rdb, all...); !reflect.DeepEqual(after, before) {
			t.Fatalf("%s: the refused call wrote: before %v, after %v", c.name, before, after)
		}
		if len(c.state) == 1 && c.resv == "" && !c.resvTTL && ownerValue[c.name] == "" {
			// The short form (no job id) reads the state the same way.
			short := []string{nowMicros, "1", "10", "1000000", "5"}
			if got, want := evalRaw(t, e.rdb, state, short), []int64{3, c.code, c.idx}; !reflect.DeepEqual(got, want) {
				t.Fatalf("%s, short form: reply %v, want %v", c.name, got, want)
			}
			if after := snap(t, e.rdb, all...); !reflect.DeepEqual(after, before) {
				t.Fatalf("%s, short form: the refused call wrote: before %v, after %v", c.name, before, after)
			}
		}
	}

	// Through the Go API: the tenant's state key is malformed.
	if err := e.rdb.Set(ctx, e.prefix+":{acme}:l:10:1000000", "1:2:3", time.Minute).Err(); err != nil {
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
		{"tenant of 257 bytes", throttle.Request{Tenant: strings.Repeat("a", 257)}, throttle.CodeTenant},
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
		{"owner tracking without a job id", throttle.Request{Tenant: "a", TrackOwner: true}, throttle.CodeJobID},
		{"negative incarnation", throttle.Request{Tenant: "a", JobID: "j", TrackOwner: true, Incarnation: -1}, throttle.CodeIncarnation},
		{"incarnation of 2^53", throttle.Request{Tenant: "a", JobID: "j", TrackOwner: true, Incarnation: 1 << 53}, throttle.CodeIncarnation},
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
	if n := hook.n.Load(); n != 0 {
		t.Fatalf("invalid requests sent %d commands to Redis, want none", n)
	}
	if ks := keys(t, e.rdb, e.prefix); len(ks) != 0 {
		t.Fatalf("invalid requests wrote %q", ks)
	}

	// The limits of the boundaries are accepted (and do reach Redis).
	for _, req := range []throttle.Request{
		{Tenant: strings.Repeat("a", 256), At: t0},
		{Tenant: strings.Repeat("é", 128), At: t0},
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
	for _, key := range []string{e.prefix + ":{acme}:l:10:1000000", e.prefix + ":{globex}:j:j1"} {
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
	if rs[1].Err != nil || !rs[1].Allowed {
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
		got := evalRaw(t, e.rdb, all, append(validArgs(), inc))
		if after := snap(t, e.rdb, all...); !reflect.DeepEqual(after, before) {
			t.Fatalf("incarnation %s: the call wrote: before %v, after %v", inc, before, after)
		}
		if len(got) != 3 || got[0] != 3 {
			t.Fatalf("incarnation %s over an owner key without TTL: reply %v, want INVALID {3, code, 3} "+
				"(lua/throttle.lua checks PTTL of state and reservation keys, not of the owner key)", inc, got)
		}
	}
}

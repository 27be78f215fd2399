package throttle_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/throttler/throttler/lua"
	"github.com/throttler/throttler/throttle"
)

// TestBatchMatchesSequential checks the multi-job form of the script: a
// batch in which many jobs of one tenant share a call must decide exactly
// what the same requests decide one call at a time, in order. Two limiters
// with their own key prefixes replay the same random rounds; each round is
// a batch at one instant of new jobs, jobs coming back for their slots
// (early or on time), copies of moved jobs (other incarnations), the same
// job twice in one batch, new jobs marked fresh, and jobs without ids.
//
// With oneLimit every tenant has a single limit, so that a batch whose job
// ids are all different takes the script's path for the worker's call
// (one limit per job, one MGET for all reads); half of its rounds have no
// job twice, and the test checks that path ran.
func TestBatchMatchesSequential(t *testing.T) {
	for _, tc := range []struct{ owner, oneLimit bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		owner := tc.owner
		t.Run(fmt.Sprintf("owner=%v,oneLimit=%v", owner, tc.oneLimit), func(t *testing.T) {
			e := setup(t)
			mgets := commandCalls(t, e.rdb, "mget")
			limits := throttle.Limits{throttle.PerSecond(20, 4), throttle.PerMinute(300, 40)}
			if tc.oneLimit {
				limits = limits[:1]
			}
			batched := newLimiter(t, e.rdb, e.prefix+"b", 3*time.Second, limits)
			single := newLimiter(t, e.rdb, e.prefix+"s", 3*time.Second, limits)
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 7))
			now := t0
			next := 0
			var known []string // job ids handed out so far
			grouped := 0
			for round := range 60 {
				now = now.Add(time.Duration(rng.IntN(400)) * time.Millisecond)
				var reqs []throttle.Request
				inRound := map[string]bool{}
				unique := tc.oneLimit && round%2 == 0
				for range 1 + rng.IntN(40) {
					req := throttle.Request{Tenant: fmt.Sprintf("t%d", rng.IntN(3)), Cost: int64(1 + rng.IntN(3)), At: now, TrackOwner: owner}
					switch r := rng.IntN(10); {
					case r < 5 || len(known) == 0:
						req.JobID = fmt.Sprintf("j%d", next)
						req.Fresh = rng.IntN(2) == 0 // never decided: may skip the read
						known = append(known, req.JobID)
						next++
					case r < 9:
						req.JobID = known[rng.IntN(len(known))]
						if unique && inRound[req.JobID] {
							continue
						}
						if owner {
							req.Incarnation = int64(rng.IntN(2))
						}
					default:
						req.TrackOwner = false // no id, no slot
					}
					// A job id belongs to one tenant.
					if req.JobID != "" {
						inRound[req.JobID] = true
						var n int
						fmt.Sscanf(req.JobID, "j%d", &n)
						req.Tenant = fmt.Sprintf("t%d", n%3)
					}
					// Tenant t2 has one limit of its own, the others two:
					// jobs with different limits share calls.
					if req.Tenant == "t2" {
						req.Limits = throttle.Limits{throttle.PerSecond(5, 3)}
					}
					reqs = append(reqs, req)
				}
				got := batched.DecideBatch(context.Background(), reqs)
				for i, req := range reqs {
					want, werr := single.Decide(context.Background(), req)
					if (werr != nil) != (got[i].Err != nil) || want != got[i].Decision {
						t.Fatalf("round %d, request %d %+v: batch gave %+v (err %v), one at a time %+v (err %v)",
							round, i, req, got[i].Decision, got[i].Err, want, werr)
					}
				}
				grouped += len(reqs)
			}
			if grouped < 500 {
				t.Fatalf("only %d requests compared", grouped)
			}
			if n := commandCalls(t, e.rdb, "mget") - mgets; tc.oneLimit && n == 0 {
				t.Fatal("no batch took the script's one-limit path (no MGET)")
			}
		})
	}
}

// TestBatchRejectsBadInput sends the worker's call (three jobs of three
// tenants, one limit each, with reservation and owner keys) straight to the
// script with one bad argument or one bad stored value at a time, in both
// forms of the further jobs (their limit repeated, or L_k = 0). Each is
// refused with its code and the position at fault, or raised as a Redis
// error for a key of another type, and nothing is written.
func TestBatchRejectsBadInput(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	const eOwnerTTL = 16
	for _, repeat := range []bool{true, false} {
		// The ARGV positions of each job's arguments.
		type job struct{ cost, inc, fresh, count, rate, period, burst int }
		var args []string
		var jobs []job
		for k := range 3 {
			at := len(args) + 1
			if k == 0 {
				args = append(args, nowMicros, "1", "1000000", "1", "10", "1000000", "5", "0", "0")
				jobs = append(jobs, job{2, 8, 9, 4, 5, 6, 7})
				continue
			}
			if repeat {
				args = append(args, "1", "0", "0", "1", "10", "1000000", "5")
				jobs = append(jobs, job{at, at + 1, at + 2, at + 3, at + 4, at + 5, at + 6})
			} else {
				// L_k = 0: its limit is the first job's, at 5, 6, 7.
				args = append(args, "1", "0", "0", "0")
				jobs = append(jobs, job{at, at + 1, at + 2, at + 3, 5, 6, 7})
			}
		}
		with := func(pos int, v string) []string {
			a := slicesClone(args)
			a[pos-1] = v
			return a
		}
		type tc struct {
			name      string
			args      []string
			code, idx int64
			// stored: KEYS position (1-based) → value, with a TTL unless
			// noTTL names that position.
			stored map[int]string
			noTTL  int
		}
		j2, j3 := jobs[1], jobs[2]
		cases := []tc{
			{name: "now 1.5", args: with(1, "1.5"), code: eNow, idx: 1},
			{name: "horizon 30 days + 1µs", args: with(3, "2592000000001"), code: eHorizon, idx: 3},
			{name: "second cost 0", args: with(j2.cost, "0"), code: eCost, idx: int64(j2.cost)},
			{name: "second cost 1e3", args: with(j2.cost, "1e3"), code: eCost, idx: int64(j2.cost)},
			{name: "second cost over the burst", args: with(j2.cost, "6"), code: eOverBurst, idx: int64(j2.burst)},
			{name: "third incarnation 2^53", args: with(j3.inc, "9007199254740992"), code: eIncarnation, idx: int64(j3.inc)},
			{name: "third incarnation empty", args: with(j3.inc, ""), code: eIncarnation, idx: int64(j3.inc)},
			{name: "second fresh 2", args: with(j2.fresh, "2"), code: eFresh, idx: int64(j2.fresh)},
			{name: "second count 9", args: with(j2.count, "9"), code: eCount, idx: int64(j2.count)},
			{name: "second count -1", args: with(j2.count, "-1"), code: eCount, idx: int64(j2.count)},
			{name: "second state 13 bytes", args: args, code: eState, idx: 4, stored: map[int]string{4: packedState(t0.UnixMicro(), 0) + "x"}},
			{name: "third state without TTL", args: args, code: eStateTTL, idx: 7, stored: map[int]string{7: packedState(t0.UnixMicro(), 0)}, noTTL: 7},
			{name: "second reservation abc", args: args, code: eResv, idx: 5, stored: map[int]string{5: "abc"}},
			{name: "second reservation without TTL", args: args, code: eResvTTL, idx: 5, stored: map[int]string{5: nowMicros}, noTTL: 5},
			{name: "third owner 1.5", args: args, code: eOwner, idx: 9, stored: map[int]string{9: "1.5"}},
			{name: "third owner without TTL", args: args, code: eOwnerTTL, idx: 9, stored: map[int]string{9: "0"}, noTTL: 9},
		}
		if repeat {
			cases = append(cases,
				tc{name: "second rate 0", args: with(j2.rate, "0"), code: eRate, idx: int64(j2.rate)},
				tc{name: "third period 999", args: with(j3.period, "999"), code: ePeriod, idx: int64(j3.period)},
				tc{name: "second burst 1000000001", args: with(j2.burst, "1000000001"), code: eBurst, idx: int64(j2.burst)},
			)
		}
		for i, c := range cases {
			name := fmt.Sprintf("repeat=%v %s", repeat, c.name)
			var keys []string
			for k := range 3 {
				ten := fmt.Sprintf("bad-%v-%d-%d", repeat, i, k)
				state, resv := rawKeys(e.prefix, ten, 1)
				keys = append(keys, state[0], resv, ownerKey(e.prefix, ten))
			}
			for pos, v := range c.stored {
				ttl := time.Minute
				if pos == c.noTTL {
					ttl = 0
				}
				if err := e.rdb.Set(ctx, keys[pos-1], v, ttl).Err(); err != nil {
					t.Fatalf("%s: SET: %v", name, err)
				}
			}
			before := snap(t, e.rdb, keys...)
			if got, want := evalRaw(t, e.rdb, keys, c.args), []int64{3, c.code, c.idx}; !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: reply %v, want %v", name, got, want)
			}
			if after := snap(t, e.rdb, keys...); !reflect.DeepEqual(after, before) {
				t.Fatalf("%s: the refused call wrote: before %v, after %v", name, before, after)
			}
		}

		// A key of another type, where MGET sees nothing: a Redis error,
		// nothing written.
		for _, pos := range []int{6, 7} { // the second owner, the third state
			var keys []string
			for k := range 3 {
				ten := fmt.Sprintf("type-%v-%d-%d", repeat, pos, k)
				state, resv := rawKeys(e.prefix, ten, 1)
				keys = append(keys, state[0], resv, ownerKey(e.prefix, ten))
			}
			if err := e.rdb.LPush(ctx, keys[pos-1], "x").Err(); err != nil {
				t.Fatalf("LPUSH: %v", err)
			}
			argv := make([]any, len(args))
			for i, a := range args {
				argv[i] = a
			}
			_, err := e.rdb.Eval(ctx, lua.Throttle, keys, argv...).Result()
			if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Fatalf("repeat=%v, a list at KEYS[%d]: error %v, want WRONGTYPE", repeat, pos, err)
			}
			for k, key := range keys {
				if k+1 == pos {
					continue
				}
				if n, err := e.rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
					t.Fatalf("repeat=%v, a list at KEYS[%d]: %s was written (%d, %v)", repeat, pos, key, n, err)
				}
			}
		}

		// The valid call itself is admitted whole.
		var keys []string
		for k := range 3 {
			ten := fmt.Sprintf("good-%v-%d", repeat, k)
			state, resv := rawKeys(e.prefix, ten, 1)
			keys = append(keys, state[0], resv, ownerKey(e.prefix, ten))
		}
		if got, want := evalRaw(t, e.rdb, keys, args), []int64{1, 0, 4, 0, 1, 0, 4, 0, 1, 0, 4, 0}; !reflect.DeepEqual(got, want) {
			t.Fatalf("repeat=%v, valid call: reply %v, want %v", repeat, got, want)
		}
	}

	// The most jobs a call may hold, 256, all of one tenant: five are
	// admitted (burst 5), the rest wait for slots 100 ms apart; one more
	// job is refused.
	for _, m := range []int{256, 257} {
		ten := fmt.Sprintf("many-%d", m)
		state, _ := rawKeys(e.prefix, ten, 1)
		var keys, args []string
		for k := range m {
			keys = append(keys, state[0], fmt.Sprintf("%s:{%s}:j:%d", e.prefix, ten, k), fmt.Sprintf("%s:{%s}:o:%d", e.prefix, ten, k))
			if k == 0 {
				args = append(args, nowMicros, "1", "3600000000", "1", "10", "1000000", "5", "0", "1")
			} else {
				args = append(args, "1", "0", "1", "0")
			}
		}
		got := evalRaw(t, e.rdb, keys, args)
		if m == 257 {
			if want := []int64{3, eKeys, 0}; !reflect.DeepEqual(got, want) {
				t.Fatalf("257 jobs: reply %v, want %v", got, want)
			}
			continue
		}
		if len(got) != 4*m {
			t.Fatalf("256 jobs: reply of %d values", len(got))
		}
		for k := range m {
			want := []int64{1, 0, int64(4 - k), 0}
			if k >= 5 {
				want = []int64{2, int64(k-4) * 100000, 0, 1}
			}
			if !reflect.DeepEqual(got[4*k:4*k+4], want) {
				t.Fatalf("256 jobs, job %d: %v, want %v", k, got[4*k:4*k+4], want)
			}
		}
	}
}

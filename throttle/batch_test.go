package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/throttle"

	"github.com/throttler/throttler/lua"
)

// TestBatchMatchesSequential checks the multi-job form of the decide
// function: a batch in which many jobs of one tenant share a call must
// decide exactly what the same requests decide one call at a time, in
// order. Two limiters with their own key prefixes replay the same random
// rounds; each round is a batch at one instant of new jobs, jobs coming back
// for their slots (early or on time), the same job twice in one batch, and
// jobs without ids; with owners (a Decider), copies of moved jobs (other
// incarnations) and new jobs marked fresh too.
//
// With oneLimit every tenant but t2 has a single limit, so that a lone
// call takes the function's path for one job under one limit; half of its
// rounds have no job twice. Every batch reads its keys with one MGET.
func TestBatchMatchesSequential(t *testing.T) {
	for _, tc := range []struct{ owner, oneLimit bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		owner := tc.owner
		t.Run(fmt.Sprintf("owner=%v,oneLimit=%v", owner, tc.oneLimit), func(t *testing.T) {
			e := setup(t)
			mgets := commandCalls(t, e.rdb, "mget")
			// Per minute, not per second: a state lives until it is full by
			// Redis' clock, and a loaded machine may take longer than a
			// second's fill time between two calls of a round.
			limits := throttle.Limits{throttle.PerMinute(20, 4), throttle.PerHour(300, 40)}
			if tc.oneLimit {
				limits = limits[:1]
			}
			batched := newLimiter(t, e.rdb, e.prefix+"b", 3*time.Minute, limits)
			single := newLimiter(t, e.rdb, e.prefix+"s", 3*time.Minute, limits)
			batchedCopies, singleCopies := newEngine(t, batched), newEngine(t, single)
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 7))
			now := t0
			next := 0
			var known []string // job ids handed out so far
			grouped := 0
			for round := range 60 {
				now = now.Add(time.Duration(rng.IntN(400)) * 60 * time.Millisecond)
				var reqs []throttle.Copy
				inRound := map[string]bool{}
				unique := tc.oneLimit && round%2 == 0
				for range 1 + rng.IntN(40) {
					req := throttle.Copy{Request: throttle.Request{Tenant: fmt.Sprintf("t%d", rng.IntN(3)), Cost: int64(1 + rng.IntN(3)), At: now}}
					switch r := rng.IntN(10); {
					case r < 5 || len(known) == 0:
						req.JobID = fmt.Sprintf("j%d", next)
						req.Fresh = owner && rng.IntN(2) == 0 // never decided: may skip the read
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
						if owner {
							continue // a copy has an id
						}
					}
					// A job id belongs to one tenant.
					if req.JobID != "" {
						inRound[req.JobID] = true
						var n int
						fmt.Sscanf(req.JobID, "j%d", &n)
						req.Tenant = fmt.Sprintf("t%d", n%3)
					}
					// Tenant t2 has one limit of its own, the others two:
					// jobs with different limits share calls. Every
					// other ten rounds t1's first limit has another rate
					// (CHANGE): its debt is forgiven and the slots
					// reserved under the other are decided again.
					switch {
					case req.Tenant == "t2":
						req.Limits = throttle.Limits{throttle.PerMinute(5, 3)}
					case req.Tenant == "t1" && round%20 >= 10:
						req.Limits = slices.Clone(limits)
						req.Limits[0] = throttle.PerMinute(8, 4)
					}
					reqs = append(reqs, req)
				}
				var got []throttle.Result
				if owner {
					got = batchedCopies.DecideBatch(context.Background(), reqs)
				} else {
					plain := make([]throttle.Request, len(reqs))
					for i, r := range reqs {
						plain[i] = r.Request
					}
					got = batched.DecideBatch(context.Background(), plain)
				}
				for i, req := range reqs {
					var want throttle.Decision
					var werr error
					if owner {
						want, werr = singleCopies.Decide(context.Background(), req)
					} else {
						want, werr = single.Decide(context.Background(), req.Request)
					}
					if (werr != nil) != (got[i].Err != nil) || want != got[i].Decision {
						t.Fatalf("round %d, request %d %+v: batch gave %+v (err %v), one at a time %+v (err %v)",
							round, i, req, got[i].Decision, got[i].Err, want, werr)
					}
				}
				grouped += len(reqs)
			}
			if grouped < 400 {
				t.Fatalf("only %d requests compared", grouped)
			}
			if n := commandCalls(t, e.rdb, "mget") - mgets; n == 0 {
				t.Fatal("no batch read its keys with MGET")
			}
		})
	}
}

// TestBatchRejectsBadInput sends the worker's call (three jobs of three
// tenants, one limit each, with reservation and owner keys) straight to the
// decide function with one bad argument or one bad stored value at a time,
// in both forms of the further jobs (their limit repeated, or L_k = 0). The
// job at fault is refused with its code and the position at fault (a key
// of another type with WRONGTYPE and its position), and nothing of it is
// written; its neighbours are decided as usual. A bad now or horizon
// refuses every job; a call whose KEYS and ARGV do not fit together is
// refused whole.
func TestBatchRejectsBadInput(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	const eOwnerTTL = 16
	admit := []int64{1, 0, 4, 0}
	for _, repeat := range []bool{true, false} {
		// The ARGV positions of each job's arguments.
		type job struct{ cost, inc, fresh, count, rate, period, burst int }
		args := []string{nowMicros, "1000000"}
		var jobs []job
		for k := range 3 {
			at := len(args) + 1
			if k == 0 || repeat {
				args = append(args, "1", "0", "0", "1", "10", "1000000", "5")
				jobs = append(jobs, job{at, at + 1, at + 2, at + 3, at + 4, at + 5, at + 6})
				continue
			}
			// L_k = 0: its limit is the first job's, at 7, 8, 9.
			args = append(args, "1", "0", "0", "0")
			jobs = append(jobs, job{at, at + 1, at + 2, at + 3, 7, 8, 9})
		}
		with := func(pos int, v string) []string {
			a := slicesClone(args)
			a[pos-1] = v
			return a
		}
		type tc struct {
			name      string
			args      []string
			job       int // the job at fault, 1 to 3; 0 for all
			code, idx int64
			// stored: KEYS position (1-based) → value, with a TTL unless
			// noTTL names that position.
			stored map[int]string
			noTTL  int
		}
		j2, j3 := jobs[1], jobs[2]
		cases := []tc{
			{name: "now 1.5", args: with(1, "1.5"), code: eNow, idx: 1},
			{name: "horizon 30 days + 1µs", args: with(2, "2592000000001"), code: eHorizon, idx: 2},
			{name: "second cost 0", args: with(j2.cost, "0"), job: 2, code: eCost, idx: int64(j2.cost)},
			{name: "second cost 1e3", args: with(j2.cost, "1e3"), job: 2, code: eCost, idx: int64(j2.cost)},
			{name: "second cost over the burst", args: with(j2.cost, "6"), job: 2, code: eOverBurst, idx: int64(j2.burst)},
			{name: "third incarnation 2^53", args: with(j3.inc, "9007199254740992"), job: 3, code: eIncarnation, idx: int64(j3.inc)},
			{name: "third incarnation empty", args: with(j3.inc, ""), job: 3, code: eIncarnation, idx: int64(j3.inc)},
			{name: "second flags 4", args: with(j2.fresh, "4"), job: 2, code: eFresh, idx: int64(j2.fresh)},
			{name: "second state 13 bytes", args: args, job: 2, code: eState, idx: 4, stored: map[int]string{4: packedState(t0.UnixMicro(), 0, 10) + "x"}},
			{name: "third state without TTL", args: args, job: 3, code: eStateTTL, idx: 7, stored: map[int]string{7: packedState(t0.UnixMicro(), 0, 10)}, noTTL: 7},
			{name: "second reservation abc", args: args, job: 2, code: eResv, idx: 5, stored: map[int]string{5: "abc"}},
			{name: "second reservation without TTL", args: args, job: 2, code: eResvTTL, idx: 5, stored: map[int]string{5: nowMicros}, noTTL: 5},
			{name: "third owner 1.5", args: args, job: 3, code: eOwner, idx: 9, stored: map[int]string{9: "1.5"}},
			{name: "third owner without TTL", args: args, job: 3, code: eOwnerTTL, idx: 9, stored: map[int]string{9: "0"}, noTTL: 9},
		}
		if repeat {
			cases = append(cases,
				tc{name: "second rate 0", args: with(j2.rate, "0"), job: 2, code: eRate, idx: int64(j2.rate)},
				tc{name: "third period 999", args: with(j3.period, "999"), job: 3, code: ePeriod, idx: int64(j3.period)},
				tc{name: "second burst 1000000001", args: with(j2.burst, "1000000001"), job: 2, code: eBurst, idx: int64(j2.burst)},
			)
		}
		// callKeys returns the keys of the three jobs of a call.
		callKeys := func(name string) []string {
			var keys []string
			for k := range 3 {
				ten := fmt.Sprintf("%s-%d", name, k)
				state, resv := rawKeys(e.prefix, ten, 1)
				keys = append(keys, state[0], resv, ownerKey(e.prefix, ten))
			}
			return keys
		}
		for i, c := range cases {
			name := fmt.Sprintf("repeat=%v %s", repeat, c.name)
			keys := callKeys(fmt.Sprintf("bad-%v-%d", repeat, i))
			for pos, v := range c.stored {
				ttl := time.Minute
				if pos == c.noTTL {
					ttl = 0
				}
				if err := e.rdb.Set(ctx, keys[pos-1], v, ttl).Err(); err != nil {
					t.Fatalf("%s: SET: %v", name, err)
				}
			}
			var faulty []string
			for k := range 3 {
				if c.job == 0 || c.job == k+1 {
					faulty = append(faulty, keys[3*k:3*k+3]...)
				}
			}
			before := snap(t, e.rdb, faulty...)
			var want []int64
			for k := range 3 {
				if c.job == 0 || c.job == k+1 {
					want = append(want, 3, c.code, c.idx, 0)
				} else {
					want = append(want, admit...)
				}
			}
			if got := fcallRaw(t, e.rdb, decideFn(), keys, c.args); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: reply %v, want %v", name, got, want)
			}
			if after := snap(t, e.rdb, faulty...); !reflect.DeepEqual(after, before) {
				t.Fatalf("%s: the refused job wrote: before %v, after %v", name, before, after)
			}
		}

		// A limit count out of range: the call does not fit together.
		for _, v := range []string{"9", "-1", "1.5"} {
			_, err := fcallErr(e.rdb, decideFn(), callKeys(fmt.Sprintf("count-%v-%s", repeat, v)), with(j2.count, v))
			if err == nil || !strings.HasPrefix(err.Error(), "BADCALL") {
				t.Fatalf("repeat=%v, second count %s: error %v, want BADCALL", repeat, v, err)
			}
			if ks := keys(t, e.rdb, e.prefix+":{count-"); len(ks) != 0 {
				t.Fatalf("repeat=%v, second count %s: a refused call wrote %q", repeat, v, ks)
			}
		}

		// A key of another type, where MGET sees nothing: WRONGTYPE for its
		// job, nothing of it written, the others decided.
		for _, pos := range []int{6, 7} { // the second owner, the third state
			keys := callKeys(fmt.Sprintf("type-%v-%d", repeat, pos))
			if err := e.rdb.LPush(ctx, keys[pos-1], "x").Err(); err != nil {
				t.Fatalf("LPUSH: %v", err)
			}
			bad := (pos - 1) / 3
			var want []int64
			for k := range 3 {
				if k == bad {
					want = append(want, 5, int64(pos), 0, 0)
				} else {
					want = append(want, admit...)
				}
			}
			if got := fcallRaw(t, e.rdb, decideFn(), keys, args); !reflect.DeepEqual(got, want) {
				t.Fatalf("repeat=%v, a list at KEYS[%d]: reply %v, want %v", repeat, pos, got, want)
			}
			for _, key := range keys[3*bad : 3*bad+3] {
				if key == keys[pos-1] {
					continue
				}
				if n, err := e.rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
					t.Fatalf("repeat=%v, a list at KEYS[%d]: %s was written (%d, %v)", repeat, pos, key, n, err)
				}
			}
		}

		// The valid call itself is admitted whole.
		keys := callKeys(fmt.Sprintf("good-%v", repeat))
		if got, want := fcallRaw(t, e.rdb, decideFn(), keys, args), []int64{1, 0, 4, 0, 1, 0, 4, 0, 1, 0, 4, 0}; !reflect.DeepEqual(got, want) {
			t.Fatalf("repeat=%v, valid call: reply %v, want %v", repeat, got, want)
		}
	}

	// The most jobs a call may hold, lua.MaxJobs, all of one tenant: five
	// are admitted (burst 5), the rest wait for slots 100 ms apart; one
	// more job is refused.
	for _, m := range []int{lua.MaxJobs, lua.MaxJobs + 1} {
		ten := fmt.Sprintf("many-%d", m)
		state, _ := rawKeys(e.prefix, ten, 1)
		var keys []string
		args := []string{nowMicros, "3600000000"}
		for k := range m {
			keys = append(keys, state[0], fmt.Sprintf("%s:{%s}:j:%d", e.prefix, ten, k), fmt.Sprintf("%s:{%s}:o:%d", e.prefix, ten, k))
			if k == 0 {
				args = append(args, "1", "0", "1", "1", "10", "1000000", "5")
			} else {
				args = append(args, "1", "0", "1", "0")
			}
		}
		if m > lua.MaxJobs {
			if _, err := fcallErr(e.rdb, decideFn(), keys, args); err == nil || !strings.HasPrefix(err.Error(), "BADCALL") {
				t.Fatalf("%d jobs: error %v, want BADCALL", m, err)
			}
			continue
		}
		got := fcallRaw(t, e.rdb, decideFn(), keys, args)
		if len(got) != 4*m {
			t.Fatalf("%d jobs: reply of %d values", m, len(got))
		}
		for k := range m {
			want := []int64{1, 0, int64(4 - k), 0}
			if k >= 5 {
				want = []int64{2, int64(k-4) * 100000, 0, 3} // reserved, by its limit
			}
			if !reflect.DeepEqual(got[4*k:4*k+4], want) {
				t.Fatalf("%d jobs, job %d: %v, want %v", m, k, got[4*k:4*k+4], want)
			}
		}
	}
}

// TestBadJobFailsAlone puts one job whose stored state is malformed, and
// one whose key holds a list, among valid jobs of other tenants in one
// DecideBatch: those two fail (ErrInvalid, and ErrRedis mentioning
// WRONGTYPE), the others are decided as if they were alone, and the batch
// is one FCALL, sent once.
func TestBadJobFailsAlone(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	rdb := e.srv.Client(t)
	l := newLimiter(t, rdb, e.prefix, time.Second, throttle.Limits{throttle.PerSecond(10, 5)})
	if err := l.Load(ctx); err != nil {
		t.Fatalf("Load: %v", err)
	}
	hook := &fcallHook{}
	rdb.AddHook(hook)
	if err := e.rdb.Set(ctx, e.prefix+":{bad}:l:1000000", "x", time.Minute).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if err := e.rdb.LPush(ctx, e.prefix+":{list}:j:j1", "x").Err(); err != nil {
		t.Fatalf("LPUSH: %v", err)
	}
	for _, withIDs := range []bool{false, true} {
		var reqs []throttle.Request
		for _, ten := range []string{"a", "bad", "b", "list", "c"} {
			req := throttle.Request{Tenant: ten, At: t0}
			if withIDs || ten == "list" {
				req.JobID = "j1"
			}
			reqs = append(reqs, req)
		}
		if !withIDs {
			reqs[3].Tenant = "a" // keep the batch in one call: all without ids
			reqs[3].JobID = ""
		}
		before := hook.n.Load()
		res := l.DecideBatch(ctx, reqs)
		if n := hook.n.Load() - before; n != 1 {
			t.Fatalf("withIDs=%v: %d FCALLs, want 1", withIDs, n)
		}
		var inv *throttle.InvalidError
		if !errors.As(res[1].Err, &inv) || inv.Code != throttle.CodeState || errors.Is(res[1].Err, throttle.ErrRedis) {
			t.Fatalf("withIDs=%v: the job over malformed state: %v, want an InvalidError with CodeState", withIDs, res[1].Err)
		}
		for _, i := range []int{0, 2, 4} {
			if res[i].Err != nil || res[i].Outcome != throttle.Admitted {
				t.Fatalf("withIDs=%v: job %d beside the bad one: %+v, want admitted", withIDs, i, res[i])
			}
		}
		if withIDs {
			if !errors.Is(res[3].Err, throttle.ErrRedis) || errors.Is(res[3].Err, throttle.ErrInvalid) || !strings.Contains(res[3].Err.Error(), "WRONGTYPE") {
				t.Fatalf("the job whose reservation is a list: %v, want ErrRedis mentioning WRONGTYPE", res[3].Err)
			}
		}
	}
	if ks := keys(t, e.rdb, e.prefix+":{list}:l:"); len(ks) != 0 {
		t.Fatalf("the job whose reservation is a list wrote %q", ks)
	}
}

// fcallHook counts the FCALLs a client sends, pipelined or not.
type fcallHook struct{ n atomic.Int64 }

func (h *fcallHook) count(cmd redis.Cmder) {
	if strings.EqualFold(cmd.Name(), "fcall") {
		h.n.Add(1)
	}
}

func (h *fcallHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *fcallHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}
func (h *fcallHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.count(c)
		}
		return next(ctx, cmds)
	}
}

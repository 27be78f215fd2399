package throttle_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// newShared returns shared levels over a fresh limiter whose global
// level is global.
func newShared(t *testing.T, global throttle.Limits, o throttle.SharedOptions) (*throttle.Shared, env) {
	t.Helper()
	e := setup(t)
	l := newLimiter(t, e.rdb, e.prefix, time.Minute, throttle.Limits{{Rate: 1000, Period: time.Second, Burst: 1000}})
	s, err := throttle.NewShared(l, throttle.LevelRules{GlobalPolicy: throttle.Policy{Limits: global}}, o)
	if err != nil {
		t.Fatal(err)
	}
	return s, e
}

// levelJobs returns n jobs of tenant at the global level.
func levelJobs(tenant string, from, n int) ([]throttle.Level, []throttle.LevelJob) {
	lv := make([]throttle.Level, n)
	js := make([]throttle.LevelJob, n)
	for i := range js {
		lv[i] = throttle.Global
		js[i] = throttle.LevelJob{Tenant: tenant, JobID: fmt.Sprintf("s:%d", from+i), Flow: tenant, Cost: 1, Weight: 1}
	}
	return lv, js
}

func TestSharedLevelTakesTurns(t *testing.T) {
	ctx := context.Background()
	s, _ := newShared(t, throttle.Limits{{Rate: 100, Period: time.Second, Burst: 1}},
		throttle.SharedOptions{Lookahead: 30 * time.Millisecond, Direct: 40 * time.Millisecond})
	lv, js := levelJobs("a", 1, 40)
	ds, errs, _ := s.Decide(ctx, lv, js)
	passed := 0
	for i, d := range ds {
		if errs[i] != nil {
			t.Fatalf("job %d: %v", i, errs[i])
		}
		if d.Passed {
			passed++
			if d.Wait > 40*time.Millisecond {
				t.Errorf("job %d granted a wait of %s, past the direct lookahead", i, d.Wait)
			}
		}
	}
	if passed < 1 || passed > 6 {
		t.Fatalf("%d of a's 40 jobs passed at once, want 1 to 6 (a slot each 10ms within 40ms)", passed)
	}
	lv, jb := levelJobs("b", 1, 5)
	if _, errs, _ := s.Decide(ctx, lv, jb); errs[0] != nil {
		t.Fatal(errs[0])
	}
	// Poke until every job of b was called: a's backlog must not keep
	// them waiting behind all of it.
	var order []string
	deadline := time.Now().Add(10 * time.Second)
	bs := 0
	for bs < 5 && time.Now().Before(deadline) {
		ws, err := s.Poke(ctx, []throttle.Level{throttle.Global})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			order = append(order, w.Tenant)
			if w.Tenant == "b" {
				bs++
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if bs < 5 {
		t.Fatalf("only %d of b's jobs called before the deadline: %v", bs, order)
	}
	// b's 5 jobs alternate with a's: all called within the first 11.
	if len(order) > 11 {
		t.Errorf("b's last job was call %d, want at most 11 (in turns with a): %v", len(order), order)
	}
}

func TestSharedPassIsUsedOnce(t *testing.T) {
	ctx := context.Background()
	s, _ := newShared(t, throttle.Limits{{Rate: 10, Period: time.Second, Burst: 1}},
		throttle.SharedOptions{Lookahead: 50 * time.Millisecond, Direct: 150 * time.Millisecond})
	lv, js := levelJobs("a", 1, 2)
	ds, errs, _ := s.Decide(ctx, lv, js)
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	if !ds[0].Passed || ds[0].Wait != 0 {
		t.Fatalf("first job: %+v, want passed now", ds[0])
	}
	if !ds[1].Passed || ds[1].Wait <= 0 {
		t.Fatalf("second job: %+v, want granted a slot ahead (100ms)", ds[1])
	}
	// Back at once: it holds its pass, and its wait is what is left.
	again, errs, _ := s.Decide(ctx, lv[1:], js[1:])
	if errs[0] != nil || !again[0].Passed || again[0].Wait <= 0 || again[0].Wait > ds[1].Wait {
		t.Fatalf("second job back early: %+v, %v; want passed with the rest of %s", again[0], errs[0], ds[1].Wait)
	}
	time.Sleep(ds[1].Wait)
	again, _, _ = s.Decide(ctx, lv[1:], js[1:])
	if !again[0].Passed || again[0].Wait != 0 {
		t.Fatalf("second job at its slot: %+v, want passed now", again[0])
	}
	// Its pass is used: decided a third time it is a new job, charged.
	again, _, _ = s.Decide(ctx, lv[1:], js[1:])
	if again[0].Passed && again[0].Wait == 0 {
		t.Fatalf("second job passed twice on one grant: %+v", again[0])
	}
}

func TestSharedGiveBackReturnsTheCharge(t *testing.T) {
	ctx := context.Background()
	s, _ := newShared(t, throttle.Limits{{Rate: 1, Period: time.Second, Burst: 1}},
		throttle.SharedOptions{Lookahead: 50 * time.Millisecond, Direct: 100 * time.Millisecond})
	lv, js := levelJobs("a", 1, 1)
	ds, errs, _ := s.Decide(ctx, lv, js)
	if errs[0] != nil || !ds[0].Passed || ds[0].Wait != 0 {
		t.Fatalf("first job: %+v %v", ds[0], errs[0])
	}
	lv2, jb := levelJobs("b", 1, 1)
	if ds, _, _ := s.Decide(ctx, lv2, jb); ds[0].Passed {
		t.Fatalf("b's job passed a bucket a emptied: %+v", ds[0])
	}
	if err := s.GiveBack(ctx, []throttle.Grant{{Level: throttle.Global, Job: js[0], Slot: time.Now(), Refund: true}}); err != nil {
		t.Fatal(err)
	}
	ws, err := s.Poke(ctx, []throttle.Level{throttle.Global})
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 || ws[0].Tenant != "b" {
		t.Fatalf("poke after the give-back called %v, want b's job", ws)
	}
}

// TestShareRefusesBadArgumentsBeforeAnyWrite: every argument of share is
// checked before the first write; a refusal names the position and
// writes nothing, apart from a Redis error or a job that must wait.
func TestShareRefusesBadArgumentsBeforeAnyWrite(t *testing.T) {
	e := setup(t)
	decide := decideFn()
	share := "share" + decide[len("decide"):]
	p := e.prefix + ":{~.global}"
	keys := []string{p + ":lw", p + ":lv", p + ":lp", p + ":lx", p + ":l:1000000", p + ":lg"}
	good := []string{"0", "100000", "250000", "60000", "1", "10", "1000000", "10", "1/acme/s:1", "acme", "1", "1", "0"}
	cases := []struct {
		name string
		at   int    // ARGV position (1-based) to replace
		val  string // its bad value
		code int64
	}{
		{"now", 1, "-1", 2},
		{"lookahead", 2, "61000000", 4},
		{"direct below lookahead", 3, "5", 4},
		{"ttl", 4, "0", 18},
		{"rate", 6, "0", 6},
		{"burst", 8, "x", 8},
		{"member without a cost", 9, "acme/s:1", 23},
		{"flow", 10, "a b", 23},
		{"cost unlike the member's", 11, "2", 3},
		{"weight", 12, "1001", 3},
		{"mode", 13, "7", 17},
	}
	for _, c := range cases {
		args := append([]string(nil), good...)
		args[c.at-1] = c.val
		got := fcallRaw(t, e.rdb, share, keys, args)
		if got[0] != 3 || got[1] != c.code || got[2] != int64(c.at) {
			t.Errorf("%s: reply %v, want {3, %d, %d, 0}", c.name, got, c.code, c.at)
		}
		if ks := keysOf(t, e, p); len(ks) != 0 {
			t.Fatalf("%s: refused call wrote %v", c.name, ks)
		}
	}
	got := fcallRaw(t, e.rdb, share, keys, good)
	if got[0] != 1 || got[1] != 0 {
		t.Fatalf("good call: %v, want the job passed now", got)
	}
}

// keysOf lists the keys under prefix p.
func keysOf(t *testing.T, e env, p string) []string {
	t.Helper()
	return keys(t, e.rdb, p)
}

// switchable is LevelPolicies whose global policy a test changes.
type switchable struct {
	mu     sync.Mutex
	global throttle.Policy
}

func (s *switchable) Global() throttle.Policy {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.global
}

func (s *switchable) Group(string) throttle.Policy { return throttle.Policy{} }

func (s *switchable) set(p throttle.Policy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.global = p
}

// TestSharedLevelWithoutLimitHandsBackItsQueue: jobs queued under a
// level whose limit then goes away, or turns to shadow mode, are all
// handed back by the next pokes, uncharged, and the list is left empty;
// a poke of the fleet's noted levels finds them.
func TestSharedLevelWithoutLimitHandsBackItsQueue(t *testing.T) {
	for _, after := range []throttle.Policy{{}, {Limits: throttle.Limits{{Rate: 1, Period: time.Minute, Burst: 1}}, Shadow: true}} {
		ctx := context.Background()
		e := setup(t)
		l := newLimiter(t, e.rdb, e.prefix+strconv.FormatBool(after.Shadow), time.Minute, throttle.Limits{{Rate: 1000, Period: time.Second, Burst: 1000}})
		pol := &switchable{global: throttle.Policy{Limits: throttle.Limits{{Rate: 1, Period: time.Minute, Burst: 1}}}}
		s, err := throttle.NewShared(l, pol, throttle.SharedOptions{})
		if err != nil {
			t.Fatal(err)
		}
		lv, js := levelJobs("a", 1, 100)
		ds, _, _ := s.Decide(ctx, lv, js)
		if ds[0].Passed != true || ds[99].Passed {
			t.Fatalf("first job %+v, last %+v: want the first passed, the others queued", ds[0], ds[99])
		}
		if err := s.NoteQueuing(ctx, []throttle.Level{throttle.Global}); err != nil {
			t.Fatal(err)
		}
		pol.set(after)
		queuing, err := s.Queuing(ctx)
		if err != nil || len(queuing) != 1 || queuing[0] != throttle.Global {
			t.Fatalf("levels queuing %v, %v; want the global one", queuing, err)
		}
		called := 0
		for range 3 {
			ws, err := s.Poke(ctx, queuing)
			if err != nil {
				t.Fatal(err)
			}
			called += len(ws)
		}
		if called != 99 {
			t.Fatalf("%+v: %d jobs handed back, want the 99 queued", after, called)
		}
		if queuing, _ := s.Queuing(ctx); len(queuing) != 0 {
			t.Errorf("%+v: levels still queuing %v once the list is empty", after, queuing)
		}
	}
}

// TestSharedForfeitGivesBackOnlyAnUnusedTurn: a called job that cannot be
// woken gives its turn back to the next, unless it came back and used it.
func TestSharedForfeitGivesBackOnlyAnUnusedTurn(t *testing.T) {
	ctx := context.Background()
	s, _ := newShared(t, throttle.Limits{{Rate: 1, Period: time.Minute, Burst: 1}}, throttle.SharedOptions{})
	lv, js := levelJobs("a", 1, 3)
	ds, _, called := s.Decide(ctx, lv, js)
	if !ds[0].Passed || ds[1].Passed || len(called) != 0 {
		t.Fatalf("decisions %+v, called %v: want the first passed, the others queued", ds, called)
	}
	// The first job gives its grant back as its tenant's limit would:
	// the next is called.
	if err := s.GiveBack(ctx, []throttle.Grant{{Level: throttle.Global, Job: js[0], Slot: time.Now(), Refund: true}}); err != nil {
		t.Fatal(err)
	}
	ws, err := s.Poke(ctx, []throttle.Level{throttle.Global})
	if err != nil || len(ws) != 1 || ws[0].JobID != "s:2" || ws[0].Level != "_global" || ws[0].Cost != 1 {
		t.Fatalf("poke called %+v, %v; want s:2 under _global", ws, err)
	}
	// s:2 came back by itself and used its pass: a forfeit gives nothing.
	if d, _, _ := s.Decide(ctx, lv[1:2], js[1:2]); !d[0].Passed {
		t.Fatalf("s:2 back with its pass: %+v", d[0])
	}
	if err := s.Forfeit(ctx, ws[0]); err != nil {
		t.Fatal(err)
	}
	if ws, _ := s.Poke(ctx, []throttle.Level{throttle.Global}); len(ws) != 0 {
		t.Fatalf("a forfeit of a used turn gave it again: called %+v", ws)
	}
	// Given a turn it never used, s:3 hands it on.
	if err := s.GiveBack(ctx, []throttle.Grant{{Level: throttle.Global, Job: js[1], Slot: time.Now(), Refund: true}}); err != nil {
		t.Fatal(err)
	}
	ws, _ = s.Poke(ctx, []throttle.Level{throttle.Global})
	if len(ws) != 1 || ws[0].JobID != "s:3" {
		t.Fatalf("poke called %+v, want s:3", ws)
	}
	if err := s.Forfeit(ctx, ws[0]); err != nil {
		t.Fatal(err)
	}
	if n := passAtOnce(t, s, throttle.Global, 2); n != 1 {
		t.Fatalf("%d jobs passed after s:3 forfeited its unused turn, want 1", n)
	}
}

// TestSharedWithoutCallsLeavesTheCallsToPokes: decisions of a Shared
// WithoutCalls call no queued job, however much room time made; a poke
// does.
func TestSharedWithoutCallsLeavesTheCallsToPokes(t *testing.T) {
	ctx := context.Background()
	s, _ := newShared(t, throttle.Limits{{Rate: 100, Period: time.Second, Burst: 1}},
		throttle.SharedOptions{Lookahead: 20 * time.Millisecond, Direct: 30 * time.Millisecond})
	lane := s.WithoutCalls()
	lv, js := levelJobs("a", 1, 20)
	if _, _, called := lane.Decide(ctx, lv, js); len(called) != 0 {
		t.Fatalf("the lane's decision called %v", called)
	}
	time.Sleep(100 * time.Millisecond) // room for about 10
	lv, js = levelJobs("b", 100, 1)
	if _, _, called := lane.Decide(ctx, lv, js); len(called) != 0 {
		t.Fatalf("the lane's decision called %v", called)
	}
	ws, err := s.Poke(ctx, []throttle.Level{throttle.Global})
	if err != nil || len(ws) == 0 {
		t.Fatalf("a poke called %v, %v; want the jobs time made room for", ws, err)
	}
}

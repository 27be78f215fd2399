package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

// levelDecider returns a Decider over a limiter whose tenants have
// tenantLimits, deciding first at the levels rules.
func levelDecider(t *testing.T, tenantLimits throttle.Limits, rules throttle.LevelRules) (*throttle.Decider, *throttle.Shared) {
	t.Helper()
	e := setup(t)
	l := newLimiter(t, e.rdb, e.prefix, time.Minute, tenantLimits)
	s, err := throttle.NewShared(l, rules, throttle.SharedOptions{Lookahead: 50 * time.Millisecond, Direct: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	d, err := throttle.NewDecider(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	return d.WithLevels(s), s
}

// levelCopy is job n of tenant, in group.
func levelCopy(tenant, group string, n int) throttle.Copy {
	return throttle.Copy{Request: throttle.Request{Tenant: tenant, JobID: fmt.Sprintf("s:%d", n), Cost: 1},
		Incarnation: int64(n), Group: group}
}

// passAtOnce decides n jobs of another tenant at lv and counts those that
// pass it now: the tokens the level has left.
func passAtOnce(t *testing.T, s *throttle.Shared, lv throttle.Level, n int) int {
	t.Helper()
	lvs := make([]throttle.Level, n)
	js := make([]throttle.LevelJob, n)
	for i := range js {
		lvs[i] = lv
		js[i] = throttle.LevelJob{Tenant: "probe", JobID: fmt.Sprintf("p:%d", i), Flow: "probe", Cost: 1, Weight: 1}
	}
	ds, errs, _ := s.Decide(context.Background(), lvs, js)
	passed := 0
	for i, d := range ds {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if d.Passed && d.Wait == 0 {
			passed++
		}
	}
	return passed
}

// TestLevelGrantGivenBackWhenTheTenantWaits: a job the global level
// granted that its tenant's own limit then makes wait gives the grant
// back: the level keeps the token for another job.
func TestLevelGrantGivenBackWhenTheTenantWaits(t *testing.T) {
	ctx := context.Background()
	d, s := levelDecider(t, throttle.Limits{{Rate: 1, Period: time.Minute, Burst: 1}},
		throttle.LevelRules{GlobalPolicy: throttle.Policy{Limits: throttle.Limits{{Rate: 1, Period: time.Minute, Burst: 10}}}})
	if got, _ := d.Decide(ctx, levelCopy("acme", "", 1)); got.Outcome != throttle.Admitted {
		t.Fatalf("acme's first job: %v, want admitted", got.Outcome)
	}
	got, err := d.Decide(ctx, levelCopy("acme", "", 2))
	if err != nil || got.Outcome != throttle.Reserved || got.LevelName != "" {
		t.Fatalf("acme's second job: %+v, %v; want reserved by its tenant's 1/m", got, err)
	}
	// 10 tokens, one spent by acme's first job: 9 left when the second's
	// grant was given back, 8 if it were not.
	if n := passAtOnce(t, s, throttle.Global, 10); n != 9 {
		t.Fatalf("%d jobs passed the global level at once, want 9", n)
	}
}

// queuedAtGlobal returns a Decider deciding acme's jobs of group org at
// the levels global and org, once acme's first job was admitted and its
// second queued at _global (the global limit's next slot past the direct
// lookahead).
func queuedAtGlobal(t *testing.T, global, org throttle.Limit) (*throttle.Decider, *throttle.Shared) {
	t.Helper()
	ctx := context.Background()
	d, s := levelDecider(t, throttle.Limits{{Rate: 1000, Period: time.Second, Burst: 1000}}, throttle.LevelRules{
		GlobalPolicy: throttle.Policy{Limits: throttle.Limits{global}},
		Groups:       map[string]throttle.Policy{"org": {Limits: throttle.Limits{org}}},
	})
	if got, err := d.Decide(ctx, levelCopy("acme", "org", 1)); err != nil || got.Outcome != throttle.Admitted {
		t.Fatalf("first job: %+v, %v; want admitted", got, err)
	}
	if got, err := d.Decide(ctx, levelCopy("acme", "org", 2)); err != nil || got.Outcome != throttle.Queued || got.LevelName != "_global" {
		t.Fatalf("second job: %+v, %v; want queued at _global (its slot past the direct lookahead)", got, err)
	}
	return d, s
}

// callSecond pokes the global level until it calls acme's second job
// (queuedAtGlobal), and fails the test if it calls anything else.
func callSecond(t *testing.T, s *throttle.Shared) {
	t.Helper()
	var called []throttle.Waiter
	deadline := time.Now().Add(5 * time.Second)
	for len(called) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		var err error
		if called, err = s.Poke(context.Background(), []throttle.Level{throttle.Global}); err != nil {
			t.Fatal(err)
		}
	}
	if len(called) != 1 || called[0].JobID != "s:2" {
		t.Fatalf("poke called %v, want the second job", called)
	}
}

// TestLevelKeptPassOfAGroup: a job that passed its group and was queued
// at the global level passes its group again when it comes back in its
// turn (decided by it again: its grant was given back when it was
// queued); the group is charged once for it.
func TestLevelKeptPassOfAGroup(t *testing.T) {
	ctx := context.Background()
	d, s := queuedAtGlobal(t, throttle.Limit{Rate: 5, Period: time.Second, Burst: 1}, throttle.Limit{Rate: 1, Period: time.Minute, Burst: 10})
	callSecond(t, s)
	deadline := time.Now().Add(5 * time.Second)
	var err error
	var back throttle.Decision
	for back.Outcome != throttle.Admitted && time.Now().Before(deadline) {
		if back, err = d.Decide(ctx, levelCopy("acme", "org", 2)); err != nil {
			t.Fatal(err)
		}
		if back.Outcome == throttle.Reserved {
			time.Sleep(back.Wait)
		} else if back.Outcome != throttle.Admitted {
			t.Fatalf("second job back in its turn: %+v", back)
		}
	}
	// org's 10 tokens: one for each job, none twice.
	if n := passAtOnce(t, s, throttle.Level{Group: "org"}, 10); n != 8 {
		t.Fatalf("%d jobs passed org at once, want 8 (two charged)", n)
	}
}

// TestLevelInShadowAdmitsAndCounts: a level in shadow mode never queues a
// job; the decision says how long enforcing it would have held it.
func TestLevelInShadowAdmitsAndCounts(t *testing.T) {
	ctx := context.Background()
	d, _ := levelDecider(t, throttle.Limits{{Rate: 1000, Period: time.Second, Burst: 1000}}, throttle.LevelRules{
		GlobalPolicy: throttle.Policy{Limits: throttle.Limits{{Rate: 1, Period: time.Minute, Burst: 1}}, Shadow: true}})
	for n := 1; n <= 3; n++ {
		got, err := d.Decide(ctx, levelCopy("acme", "", n))
		if err != nil || got.Outcome != throttle.Admitted {
			t.Fatalf("job %d: %+v, %v; want admitted (shadow)", n, got, err)
		}
		if n > 1 && (got.ShadowWait < 50*time.Second || got.LevelName != "_global") {
			t.Fatalf("job %d: shadow wait %s at %q, want about a minute per job at _global", n, got.ShadowWait, got.LevelName)
		}
	}
}

// TestLevelWeightScalesTheShare: under a binding level, a tenant of
// weight 3 is called three times as often as one of weight 1.
func TestLevelWeightScalesTheShare(t *testing.T) {
	ctx := context.Background()
	s, _ := newShared(t, throttle.Limits{{Rate: 200, Period: time.Second, Burst: 1}},
		throttle.SharedOptions{Lookahead: 20 * time.Millisecond, Direct: 25 * time.Millisecond})
	var lvs []throttle.Level
	var js []throttle.LevelJob
	for i := range 40 {
		for _, f := range []struct {
			t string
			w int64
		}{{"heavy", 3}, {"light", 1}} {
			lvs = append(lvs, throttle.Global)
			js = append(js, throttle.LevelJob{Tenant: f.t, JobID: fmt.Sprintf("s:%d", i), Flow: f.t, Cost: 1, Weight: f.w})
		}
	}
	if _, errs, _ := s.Decide(ctx, lvs, js); errs[0] != nil {
		t.Fatal(errs[0])
	}
	count := map[string]int{}
	deadline := time.Now().Add(5 * time.Second)
	for count["light"] < 8 && time.Now().Before(deadline) {
		ws, err := s.Poke(ctx, []throttle.Level{throttle.Global})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			count[w.Tenant]++
		}
		time.Sleep(5 * time.Millisecond)
	}
	if count["heavy"] < 20 || count["heavy"] > 28 {
		t.Fatalf("called heavy %d times while light was called %d, want about 24 (weight 3 to 1)", count["heavy"], count["light"])
	}
}

// TestLevelsCostNothingWithoutALevel: a Decider with levels deciding
// jobs that have none (no global limit, no group) makes the calls a
// Decider without levels makes: one FCALL for the batch, no more.
func TestLevelsCostNothingWithoutALevel(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	l := newLimiter(t, e.rdb, e.prefix, time.Minute, throttle.Limits{{Rate: 1000, Period: time.Second, Burst: 1000}})
	s, err := throttle.NewShared(l, throttle.LevelRules{Groups: map[string]throttle.Policy{
		"org": {Limits: throttle.Limits{{Rate: 1, Period: time.Second, Burst: 1}}}}}, throttle.SharedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := throttle.NewDecider(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	leveled := plain.WithLevels(s)
	fcalls := func(d *throttle.Decider, from int) int64 {
		before, err := testenv.CommandStats(ctx, e.rdb)
		if err != nil {
			t.Fatal(err)
		}
		copies := make([]throttle.Copy, 20)
		for i := range copies {
			copies[i] = levelCopy(fmt.Sprintf("t%d", i%5), "", from+i)
		}
		for i, r := range d.DecideBatch(ctx, copies) {
			if r.Err != nil || r.Outcome != throttle.Admitted {
				t.Fatalf("job %d: %+v", i, r)
			}
		}
		after, err := testenv.CommandStats(ctx, e.rdb)
		if err != nil {
			t.Fatal(err)
		}
		return after["fcall"].Calls - before["fcall"].Calls
	}
	fcalls(plain, 1000) // the library loaded
	want, got := fcalls(plain, 1), fcalls(leveled, 100)
	if got != want {
		t.Fatalf("a batch without levels took %d FCALLs through a Decider with levels, %d without", got, want)
	}
}

// TestLevelRefusesACostOverItsBurst: a job whose cost no burst of its
// level can hold is invalid, naming the level, and charged nowhere.
func TestLevelRefusesACostOverItsBurst(t *testing.T) {
	d, s := levelDecider(t, throttle.Limits{{Rate: 1000, Period: time.Second, Burst: 1000}},
		throttle.LevelRules{GlobalPolicy: throttle.Policy{Limits: throttle.Limits{{Rate: 5, Period: time.Second, Burst: 5}}}})
	cp := levelCopy("acme", "", 1)
	cp.Cost = 6
	_, err := d.Decide(context.Background(), cp)
	if !errors.Is(err, throttle.ErrInvalid) || !strings.Contains(err.Error(), "_global") {
		t.Fatalf("a cost of 6 under a burst of 5: %v, want invalid naming _global", err)
	}
	if n := passAtOnce(t, s, throttle.Global, 6); n != 5 {
		t.Fatalf("%d jobs passed the global level at once, want its 5: nothing charged", n)
	}
}

// TestLevelGroupsTenantsTakeTurnsAtTheGlobalLevel: at the global level a
// group takes turns with other flows, and within it its tenants take the
// group's turns in turn: a light tenant of a group passes its group's
// flood instead of waiting behind all of it.
func TestLevelGroupsTenantsTakeTurnsAtTheGlobalLevel(t *testing.T) {
	ctx := context.Background()
	s, _ := newShared(t, throttle.Limits{{Rate: 200, Period: time.Second, Burst: 1}},
		throttle.SharedOptions{Lookahead: 20 * time.Millisecond, Direct: 25 * time.Millisecond})
	job := func(tenant, group string, n int) (throttle.Level, throttle.LevelJob) {
		flow := tenant
		if group != "" {
			flow = group
		}
		return throttle.Global, throttle.LevelJob{Tenant: tenant, JobID: fmt.Sprintf("s:%d", n), Flow: flow, Cost: 1, Weight: 1}
	}
	var lvs []throttle.Level
	var js []throttle.LevelJob
	add := func(tenant, group string, from, n int) {
		for i := range n {
			lv, j := job(tenant, group, from+i)
			lvs, js = append(lvs, lv), append(js, j)
		}
	}
	add("y1", "org-1", 0, 60)
	if _, errs, _ := s.Decide(ctx, lvs, js); errs[0] != nil {
		t.Fatal(errs[0])
	}
	lvs, js = nil, nil
	add("y2", "org-1", 100, 5)
	add("y3", "", 200, 5)
	if _, errs, _ := s.Decide(ctx, lvs, js); errs[0] != nil {
		t.Fatal(errs[0])
	}
	var order []string
	at := map[string]int{}
	deadline := time.Now().Add(5 * time.Second)
	for at["y2"] < 5 && time.Now().Before(deadline) {
		ws, err := s.Poke(ctx, []throttle.Level{throttle.Global})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			order = append(order, w.Tenant)
			at[w.Tenant]++
		}
		time.Sleep(5 * time.Millisecond)
	}
	if at["y2"] < 5 {
		t.Fatalf("y2 called %d times of 5 before the deadline: %v", at["y2"], order)
	}
	// y2 shares org-1's turns with y1, and org-1 shares the level with
	// y3: y2's five come within the first 25 calls, not after y1's 60.
	if len(order) > 25 {
		t.Errorf("y2's fifth job was call %d: %v", len(order), order)
	}
}

// TestLevelQueuedJobKeepsNoGrantOfTheLevelBefore: a job its group grants
// that the global level then queues gives the group's grant back, so
// that a group's grants cannot pile up while the global level binds and
// be used on top of its rate once it stops; called back, the job is
// decided by its group again.
func TestLevelQueuedJobKeepsNoGrantOfTheLevelBefore(t *testing.T) {
	_, s := queuedAtGlobal(t, throttle.Limit{Rate: 5, Period: time.Second, Burst: 1}, throttle.Limit{Rate: 1, Period: time.Minute, Burst: 10})
	// org's 10 tokens: the first job's spent, the second's given back.
	if n := passAtOnce(t, s, throttle.Level{Group: "org"}, 10); n != 9 {
		t.Fatalf("%d jobs passed org at once, want 9 (one charged, the queued job's grant given back)", n)
	}
}

// TestLevelCallGivenBackWhenTheGroupQueues: a job the global level called
// that its group then queues gives the call back, so that the global
// level's room goes to the jobs that can run rather than to passes used
// late, on top of its later grants.
func TestLevelCallGivenBackWhenTheGroupQueues(t *testing.T) {
	ctx := context.Background()
	d, s := queuedAtGlobal(t, throttle.Limit{Rate: 1, Period: time.Second, Burst: 1}, throttle.Limit{Rate: 1, Period: time.Minute, Burst: 2})
	// Another tenant of org takes the group's last token meanwhile.
	if n := passAtOnce(t, s, throttle.Level{Group: "org"}, 1); n != 1 {
		t.Fatalf("%d jobs passed org at once, want 1", n)
	}
	callSecond(t, s)
	// Called, charged at _global (1/s: its bucket empty for a second);
	// back, its group has no token for a minute: queued at org.
	if got, err := d.Decide(ctx, levelCopy("acme", "org", 2)); err != nil || got.Outcome != throttle.Queued || got.LevelName != "group.org" {
		t.Fatalf("the called job back: %+v, %v; want queued at group.org", got, err)
	}
	// The call's token back: another job passes within the direct
	// lookahead (the called job's slot was up to the call lookahead
	// ahead), not a second later.
	ds, errs, _ := s.Decide(ctx, []throttle.Level{throttle.Global}, []throttle.LevelJob{{Tenant: "probe", JobID: "p:1", Flow: "probe", Cost: 1, Weight: 1}})
	if errs[0] != nil || !ds[0].Passed || ds[0].Wait > 100*time.Millisecond {
		t.Fatalf("another job at _global: %+v, %v; want passed within 100ms: the call given back", ds[0], errs[0])
	}
}

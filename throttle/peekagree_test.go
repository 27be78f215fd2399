package throttle_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/throttle"
)

// Peek computes in Go what the library's functions compute in Lua (the
// state's carry-over to a changed rate, the tokens, the charge of a job):
// the rules are defined in lua/rules.lua, and this property test holds
// Peek to them. It replays random sequences of decisions, batches,
// reservations and their returns, live limit changes (rate, burst, period
// with and without Carry, limits added and removed, shadow on and off) and
// holds, at explicit times; after every step it asks Peek what a job of
// cost 1 arriving now would get, and compares that with what the engine
// decides for such a job at that moment (on a copy of the keys, so the
// sequence goes on untouched), to the microsecond: the wait, the limit
// that sets it, the outcome and the whole tokens left, for the tenant and
// for each bucket on its own; and each bucket is full at its FullAt, not a
// microsecond before.

// peekSeedEnv names the variable that replays one sequence: its seed, as
// a failure prints it. peekRunsEnv sets how many sequences a run tries
// (peekRuns by default), for a longer search than CI's.
const (
	peekSeedEnv = "THROTTLER_PEEK_SEED"
	peekRunsEnv = "THROTTLER_PEEK_RUNS"
)

// peekRuns and peekSteps size a run of the test: sequences, and steps of
// each.
const (
	peekRuns  = 16
	peekSteps = 60
)

// peekPeriods are the periods the sequences' limits take: a minute at
// least, so that no state expires by Redis' own clock while a step runs
// (check also holds the keys while it compares: freeze).
var peekPeriods = []time.Duration{time.Minute, 7 * time.Minute, time.Hour, 24 * time.Hour}

// peekPool are the job ids of a sequence: few, so that jobs come back to
// the slots they hold.
var peekPool = []string{"j0", "j1", "j2", "j3", "j4", "j5"}

func TestPeekAgreesWithTheEngine(t *testing.T) {
	base, runs := peekSeeds(t, peekRuns)
	e := setup(t)
	var total agreeCounts
	for i := range runs {
		seed := base + uint64(i)
		s := newAgreeSeq(t, e, seed, fmt.Sprintf("%s_%d", e.prefix, i))
		for range peekSteps {
			s.step()
			s.check()
		}
		total.add(s.counts)
		s.clear() // KEYS, which the steps run, reads the whole keyspace
	}
	t.Logf("%d steps: %+v", runs*peekSteps, total)
	// A sequence that never reaches a state is no evidence for it.
	if runs > 1 && (total.inDebtChange == 0 || total.probeReserved == 0 || total.probeAdmitted == 0 ||
		total.probeLimited == 0 || total.carries == 0 || total.holds == 0 || total.shadow == 0) {
		t.Fatalf("the sequences missed a case: %+v", total)
	}
}

// peekSeeds returns the first seed of a test's sequences and how many to
// run: runs from a seed of the clock, or as peekRunsEnv and peekSeedEnv
// say. It logs them.
func peekSeeds(t *testing.T, runs int) (uint64, int) {
	t.Helper()
	base := uint64(time.Now().UnixNano())
	if v := os.Getenv(peekRunsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: not a positive number", peekRunsEnv, v)
		}
		runs = n
	}
	if v := os.Getenv(peekSeedEnv); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: not a seed", peekSeedEnv, v)
		}
		base, runs = s, 1
	}
	t.Logf("seeds %d to %d (%s=<seed> replays one)", base, base+uint64(runs)-1, peekSeedEnv)
	return base, runs
}

// agreeCounts counts what the sequences went through.
type agreeCounts struct {
	steps, inDebtChange, carries, holds, returns, batches                 int
	probeAdmitted, probeReserved, probeLimited, shadow, bucketsPerStepMax int
}

func (c *agreeCounts) add(o agreeCounts) {
	c.steps += o.steps
	c.inDebtChange += o.inDebtChange
	c.carries += o.carries
	c.holds += o.holds
	c.returns += o.returns
	c.batches += o.batches
	c.probeAdmitted += o.probeAdmitted
	c.probeReserved += o.probeReserved
	c.probeLimited += o.probeLimited
	c.shadow += o.shadow
	c.bucketsPerStepMax = max(c.bucketsPerStepMax, o.bucketsPerStepMax)
}

// agreeSeq is one random sequence: a tenant whose policy changes live,
// the limiter that decides it, and a second limiter over a key prefix of
// its own on which the probes are decided.
type agreeSeq struct {
	t       *testing.T
	e       env
	ctx     context.Context
	rng     *rand.Rand
	seed    uint64
	live    *livePolicies
	horizon time.Duration
	main    *throttle.Limiter
	mainP   string // main's key prefix
	probe   *throttle.Limiter
	probeC  *engine
	probeP  string // probe's key prefix
	at      time.Time
	slots   map[string]time.Time // the slots the pool's jobs hold
	log     []string
	counts  agreeCounts
}

const agreeTenant = "acme"

func newAgreeSeq(t *testing.T, e env, seed uint64, prefix string) *agreeSeq {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	s := &agreeSeq{t: t, e: e, ctx: context.Background(), rng: rng, seed: seed,
		mainP: prefix + "m", probeP: prefix + "p", at: t0, slots: map[string]time.Time{}}
	s.live = &livePolicies{def: throttle.Policy{Limits: s.randomLimits()}}
	// No horizon (every wait refused uncharged), a short one (some waits
	// reserved, some refused) or a long one (every wait reserved).
	s.horizon = []time.Duration{0, 3 * time.Minute, 30 * time.Minute, 10 * 24 * time.Hour}[rng.IntN(4)]
	var err error
	if s.main, err = throttle.New(e.rdb, throttle.Options{Policies: s.live, Horizon: s.horizon, Prefix: s.mainP}); err != nil {
		t.Fatal(err)
	}
	if s.probe, err = throttle.New(e.rdb, throttle.Options{Policies: s.live, Horizon: s.horizon, Prefix: s.probeP}); err != nil {
		t.Fatal(err)
	}
	s.probeC = newEngine(t, s.probe)
	s.logf("start: %v, horizon %s", s.live.def.Limits, s.horizon)
	return s
}

// logf records a step, for the failure message.
func (s *agreeSeq) logf(format string, args ...any) {
	s.log = append(s.log, fmt.Sprintf("t0+%s: ", s.at.Sub(t0))+fmt.Sprintf(format, args...))
}

// fatalf fails the test with the seed and the steps so far.
func (s *agreeSeq) fatalf(format string, args ...any) {
	s.t.Helper()
	steps := s.log
	if len(steps) > 40 {
		steps = steps[len(steps)-40:]
	}
	s.t.Fatalf("seed %d (replay: %s=%d), step %d: %s\nsteps (last 40):\n  %s",
		s.seed, peekSeedEnv, s.seed, s.counts.steps, fmt.Sprintf(format, args...), strings.Join(steps, "\n  "))
}

// randomLimit is a limit of period p with a small rate and burst, so that
// buckets fill, empty and go into debt within a few steps.
func (s *agreeSeq) randomLimit(p time.Duration) throttle.Limit {
	return throttle.Limit{Rate: 1 + s.rng.Int64N(40), Period: p, Burst: 1 + s.rng.Int64N(8)}
}

// randomLimits is one to three limits of distinct periods.
func (s *agreeSeq) randomLimits() throttle.Limits {
	ps := slices.Clone(peekPeriods)
	s.rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	ls := make(throttle.Limits, 1+s.rng.IntN(3))
	for i := range ls {
		ls[i] = s.randomLimit(ps[i])
	}
	return ls
}

// unit is the time one token of the tenant's first limit takes.
func (s *agreeSeq) unit() time.Duration {
	l := s.live.Policy(agreeTenant).Limits[0]
	return max(time.Microsecond, (l.Period / time.Duration(l.Rate)).Truncate(time.Microsecond))
}

// advance moves the clock on: not at all, by a microsecond, by whole
// tokens (to land on boundaries), by anything up to a few tokens, by a
// fill time, or (rarely) back.
func (s *agreeSeq) advance() {
	u := s.unit()
	var d time.Duration
	switch k := s.rng.IntN(20); {
	case k < 5:
	case k < 7:
		d = time.Microsecond
	case k < 11:
		d = time.Duration(1+s.rng.IntN(3)) * u
	case k < 17:
		d = time.Duration(s.rng.Int64N(int64(3*u/time.Microsecond))) * time.Microsecond
	case k < 19:
		d = longestFill(s.live.Policy(agreeTenant).Limits)
	default:
		d = -time.Duration(s.rng.Int64N(int64(u/time.Microsecond))) * time.Microsecond
	}
	s.at = s.at.Add(d)
}

// longestFill is the longest time a bucket of ls takes to fill.
func longestFill(ls throttle.Limits) time.Duration {
	var d time.Duration
	for _, l := range ls {
		d = max(d, l.Period*time.Duration(l.Burst)/time.Duration(l.Rate))
	}
	return d.Truncate(time.Microsecond)
}

// cost is a job's cost: mostly 1, at most the smallest burst.
func (s *agreeSeq) cost() int64 {
	if s.rng.IntN(3) > 0 {
		return 1
	}
	return 1 + s.rng.Int64N(s.live.Policy(agreeTenant).Limits.MinBurst())
}

// step takes one random step of the sequence.
func (s *agreeSeq) step() {
	s.t.Helper()
	s.counts.steps++
	switch k := s.rng.IntN(100); {
	case k < 35:
		s.advance()
		s.decide()
	case k < 45:
		s.comeBack()
	case k < 55:
		s.advance()
		s.batch()
	case k < 80:
		s.change()
	case k < 88:
		s.hold()
	default:
		s.advance()
		s.logf("time passes")
	}
}

// request is a job of the pool (or, one time in five, without an id) at
// the sequence's time.
func (s *agreeSeq) request() throttle.Request {
	req := throttle.Request{Tenant: agreeTenant, Cost: s.cost(), At: s.at}
	if s.rng.IntN(5) > 0 {
		req.JobID = peekPool[s.rng.IntN(len(peekPool))]
	}
	return req
}

// noteDecision records the slot a job now holds, if any.
func (s *agreeSeq) noteDecision(req throttle.Request, d throttle.Decision) {
	if req.JobID == "" {
		return
	}
	if d.Outcome == throttle.Reserved {
		s.slots[req.JobID] = req.At.Add(d.Wait)
	} else if d.Outcome == throttle.Admitted {
		delete(s.slots, req.JobID)
	}
}

func (s *agreeSeq) decide() {
	s.t.Helper()
	req := s.request()
	d, err := s.main.Decide(s.ctx, req)
	if err != nil {
		s.fatalf("Decide(%+v): %v", req, err)
	}
	s.noteDecision(req, d)
	s.logf("decide %q cost %d: %v wait %s", req.JobID, req.Cost, d.Outcome, d.Wait)
}

// comeBack brings a job holding a slot back at its slot (or, one time in
// four, before it).
func (s *agreeSeq) comeBack() {
	s.t.Helper()
	ids := make([]string, 0, len(s.slots))
	for id := range s.slots {
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		s.advance()
		s.decide()
		return
	}
	slices.Sort(ids)
	id := ids[s.rng.IntN(len(ids))]
	if slot := s.slots[id]; slot.After(s.at) {
		ahead := slot.Sub(s.at)
		s.at = slot
		if s.rng.IntN(4) == 0 {
			s.at = slot.Add(-time.Duration(1+s.rng.Int64N(int64(ahead/time.Microsecond))) * time.Microsecond)
		}
	}
	req := throttle.Request{Tenant: agreeTenant, JobID: id, Cost: s.cost(), At: s.at}
	d, err := s.main.Decide(s.ctx, req)
	if err != nil {
		s.fatalf("Decide(%+v): %v", req, err)
	}
	s.noteDecision(req, d)
	s.counts.returns++
	s.logf("%q back (slot t0+%s): %v wait %s", id, s.slots[id].Sub(t0), d.Outcome, d.Wait)
}

// batch decides two to five jobs in one DecideBatch: the paths that
// decide several jobs in one function call.
func (s *agreeSeq) batch() {
	s.t.Helper()
	n := 2 + s.rng.IntN(4)
	reqs := make([]throttle.Request, 0, n)
	seen := map[string]bool{}
	for range n {
		req := s.request()
		if req.JobID != "" && seen[req.JobID] {
			continue
		}
		seen[req.JobID] = true
		reqs = append(reqs, req)
	}
	var out []string
	for i, r := range s.main.DecideBatch(s.ctx, reqs) {
		if r.Err != nil {
			s.fatalf("DecideBatch job %d (%+v): %v", i, reqs[i], r.Err)
		}
		s.noteDecision(reqs[i], r.Decision)
		out = append(out, fmt.Sprintf("%q cost %d: %v %s", reqs[i].JobID, reqs[i].Cost, r.Outcome, r.Wait))
	}
	s.counts.batches++
	s.logf("batch: %s", strings.Join(out, ", "))
}

// change changes the tenant's policy live: a rate, a burst or a period
// (carried or not), a limit added or removed, or shadow turned on or off.
func (s *agreeSeq) change() {
	s.t.Helper()
	from := s.live.Policy(agreeTenant)
	to := throttle.Policy{Limits: slices.Clone(from.Limits), Shadow: from.Shadow}
	i := s.rng.IntN(len(to.Limits))
	what := ""
	switch k := s.rng.IntN(100); {
	case k < 45:
		r := to.Limits[i].Rate
		for r == to.Limits[i].Rate {
			r = 1 + s.rng.Int64N(40)
		}
		what = fmt.Sprintf("rate of %v to %d", to.Limits[i], r)
		to.Limits[i].Rate = r
	case k < 60:
		to.Limits[i].Burst = 1 + s.rng.Int64N(8)
		what = fmt.Sprintf("burst of %v to %d", from.Limits[i], to.Limits[i].Burst)
	case k < 75:
		var free []time.Duration
		for _, p := range peekPeriods {
			if !slices.ContainsFunc(to.Limits, func(l throttle.Limit) bool { return l.Period == p }) {
				free = append(free, p)
			}
		}
		if len(free) == 0 {
			return
		}
		to.Limits[i].Period = free[s.rng.IntN(len(free))]
		what = fmt.Sprintf("period of %v to %s", from.Limits[i], to.Limits[i].Period)
	case k < 85:
		if len(to.Limits) == 1 {
			return
		}
		what = fmt.Sprintf("%v removed", to.Limits[i])
		to.Limits = slices.Delete(to.Limits, i, i+1)
	case k < 95:
		if len(to.Limits) == 3 {
			return
		}
		for _, l := range s.randomLimits() {
			if !slices.ContainsFunc(to.Limits, func(o throttle.Limit) bool { return o.Period == l.Period }) {
				to.Limits = append(to.Limits, l)
				what = fmt.Sprintf("%v added", l)
				break
			}
		}
		if what == "" {
			return
		}
	default:
		to.Shadow = !to.Shadow
		what = fmt.Sprintf("shadow %v", to.Shadow)
	}
	// A change while a bucket is in debt: the case the engine forgives.
	if snap, err := s.main.Peek(s.ctx, agreeTenant, s.at); err == nil {
		for _, b := range snap.Buckets {
			if b.Tokens < 0 {
				s.counts.inDebtChange++
				what += " (in debt)"
				break
			}
		}
	}
	// The watcher carries a changed period before applying the policy;
	// a change it does not see (a default's) is not carried.
	if s.rng.IntN(4) > 0 {
		if err := s.main.Carry(s.ctx, agreeTenant, from, to, s.at); err != nil {
			s.fatalf("Carry(%v → %v): %v", from, to, err)
		}
		s.counts.carries++
		what += ", carried"
	}
	s.live.set(to)
	s.logf("change: %s: %v", what, to)
}

// hold holds the tenant until a time within a few fill times.
func (s *agreeSeq) hold() {
	s.t.Helper()
	s.advance()
	fill := longestFill(s.live.Policy(agreeTenant).Limits)
	until := s.at.Add(time.Duration(s.rng.Int64N(int64(2*fill/time.Microsecond)+1)) * time.Microsecond)
	if err := s.main.HoldAt(s.ctx, agreeTenant, s.at, until); err != nil {
		s.fatalf("HoldAt(%s): %v", until.Sub(t0), err)
	}
	s.counts.holds++
	s.logf("hold until t0+%s", until.Sub(t0))
}

// check compares Peek at the sequence's time with the decisions a job of
// cost 1 gets then: under the tenant's limits, and under each alone.
func (s *agreeSeq) check() {
	s.t.Helper()
	s.freeze()
	snap, err := s.main.Peek(s.ctx, agreeTenant, s.at)
	if err != nil {
		s.fatalf("Peek: %v", err)
	}
	pol := s.live.Policy(agreeTenant)
	if len(snap.Buckets) != len(pol.Limits) {
		s.fatalf("Peek gave %d buckets for %v", len(snap.Buckets), pol.Limits)
	}
	if pol.Shadow {
		s.counts.shadow++
	}
	s.counts.bucketsPerStepMax = max(s.counts.bucketsPerStepMax, len(snap.Buckets))
	want := s.predict(pol.Shadow, snap.Wait, snap.Binding, snap.Buckets)
	got := s.probeOnce(nil, s.at)
	switch got.Outcome {
	case throttle.Admitted:
		s.counts.probeAdmitted++
	case throttle.Reserved:
		s.counts.probeReserved++
	case throttle.Limited:
		s.counts.probeLimited++
	}
	if got != want {
		s.fatalf("the next job of cost 1 got %+v; Peek predicts %+v from %+v", got, want, snap)
	}
	for i, b := range snap.Buckets {
		want := s.predict(pol.Shadow, b.Wait, b.Limit, snap.Buckets[i:i+1])
		if got := s.probeOnce(throttle.Limits{pol.Limits[i]}, s.at); got != want {
			s.fatalf("under %v alone, the next job of cost 1 got %+v; Peek's bucket %+v predicts %+v", pol.Limits[i], got, b, want)
		}
		// In debt exactly when slots are reserved ahead, the last of them
		// before the next job's.
		if inDebt := b.Tokens < 0; inDebt == b.ReservedUntil.IsZero() ||
			(inDebt && (!b.ReservedUntil.After(s.at) || b.ReservedUntil.After(s.at.Add(b.Wait)))) {
			s.fatalf("Peek's bucket %+v at t0+%s: its tokens, slots reserved and wait disagree", b, s.at.Sub(t0))
		}
		// Full again at FullAt (rounded up to the µs), not a µs before;
		// but a state of another rate is carried over at the first call
		// that names it, and Peek shows it carried over now.
		if b.FullAt.After(s.at) && b.StoredRate == 0 {
			full := func(d throttle.Decision) bool {
				return d.Outcome == throttle.Admitted && d.Wait == 0 && d.ShadowWait == 0 && d.Remaining == b.Limit.Burst-1
			}
			if d := s.probeOnce(throttle.Limits{pol.Limits[i]}, b.FullAt); !full(d) {
				s.fatalf("under %v alone, a job at FullAt got %+v, not a full bucket's decision; Peek's bucket %+v", pol.Limits[i], d, b)
			}
			if d := s.probeOnce(throttle.Limits{pol.Limits[i]}, b.FullAt.Add(-time.Microsecond)); full(d) {
				s.fatalf("under %v alone, a job a µs before FullAt got %+v, a full bucket's decision; Peek's bucket %+v", pol.Limits[i], d, b)
			}
		}
	}
}

// predict is the decision Peek predicts for a job of cost 1 with an id,
// by the rules of decide (lua/rules.lua: verdict): from the wait it
// gives and the limit that sets it, and the tokens of its buckets bs.
func (s *agreeSeq) predict(shadow bool, wait time.Duration, by throttle.Limit, bs []throttle.Bucket) throttle.Decision {
	low := math.Inf(1)
	for _, b := range bs {
		low = min(low, math.Floor(b.Tokens))
	}
	// The whole tokens left in the tightest bucket, charged or not.
	left := func(charged bool) int64 {
		if charged {
			return int64(max(low-1, 0))
		}
		return int64(max(low, 0))
	}
	// Past the horizon a wait is cut to it (and not charged).
	capped := wait
	if s.horizon > 0 && wait > s.horizon {
		capped = s.horizon
	}
	charged := wait <= s.horizon
	switch {
	case shadow:
		d := throttle.Decision{Outcome: throttle.Admitted, Shadow: true, ShadowWait: capped, Remaining: left(charged)}
		if capped > 0 {
			d.Binding = by
		}
		return d
	case wait == 0:
		return throttle.Decision{Outcome: throttle.Admitted, Remaining: left(true)}
	case charged:
		return throttle.Decision{Outcome: throttle.Reserved, Wait: wait, Binding: by}
	}
	return throttle.Decision{Outcome: throttle.Limited, Wait: capped, Binding: by, Remaining: left(false)}
}

// probeOnce copies the main keys to the probe's prefix and decides a job
// of cost 1 there, at at, under ls (the tenant's limits
// when nil): through Decide, through a batch (as its first job), or
// through a Decider, so that every decide path is held to Peek.
func (s *agreeSeq) probeOnce(ls throttle.Limits, at time.Time) throttle.Decision {
	s.t.Helper()
	s.copyKeys()
	req := throttle.Request{Tenant: agreeTenant, JobID: "probe", At: at, Limits: ls}
	var d throttle.Decision
	var err error
	switch s.rng.IntN(3) {
	case 0:
		d, err = s.probe.Decide(s.ctx, req)
	case 1:
		second := req
		second.JobID = "probe-2"
		r := s.probe.DecideBatch(s.ctx, []throttle.Request{req, second})
		d, err = r[0].Decision, r[0].Err
	default:
		d, err = s.probeC.Decide(s.ctx, throttle.Copy{Request: req, Incarnation: 1})
	}
	if err != nil {
		s.fatalf("probe %+v: %v", req, err)
	}
	return d
}

// freeze makes every main key outlive the test, so that none expires by
// Redis' clock (which is not the sequence's) between Peek and the probes.
func (s *agreeSeq) freeze() {
	s.t.Helper()
	if err := freezeKeys(s.ctx, s.e.rdb, s.mainP); err != nil {
		s.fatalf("%v", err)
	}
}

// copyKeys replaces the probe's keys with a copy of the main ones.
func (s *agreeSeq) copyKeys() {
	s.t.Helper()
	if err := copyKeys(s.ctx, s.e.rdb, s.mainP, s.probeP); err != nil {
		s.fatalf("%v", err)
	}
}

// freezeKeys gives every key of prefix an hour to live at least.
func freezeKeys(ctx context.Context, rdb *redis.Client, prefix string) error {
	ks, err := rdb.Keys(ctx, prefix+":*").Result()
	if err != nil {
		return fmt.Errorf("KEYS: %w", err)
	}
	pipe := rdb.Pipeline()
	for _, k := range ks {
		pipe.Do(ctx, "PEXPIRE", k, time.Hour.Milliseconds(), "GT")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("PEXPIRE: %w", err)
	}
	return nil
}

// copyKeys replaces the keys of prefix to with a copy of those of prefix
// from (COPY keeps their TTLs).
func copyKeys(ctx context.Context, rdb *redis.Client, from, to string) error {
	old, err := rdb.Keys(ctx, to+":*").Result()
	if err != nil {
		return fmt.Errorf("KEYS: %w", err)
	}
	src, err := rdb.Keys(ctx, from+":*").Result()
	if err != nil {
		return fmt.Errorf("KEYS: %w", err)
	}
	pipe := rdb.Pipeline()
	if len(old) > 0 {
		pipe.Del(ctx, old...)
	}
	for _, k := range src {
		pipe.Copy(ctx, k, to+strings.TrimPrefix(k, from), 0, true)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("copying the keys: %w", err)
	}
	return nil
}

// clear deletes the sequence's keys.
func (s *agreeSeq) clear() {
	s.t.Helper()
	if ks := keys(s.t, s.e.rdb, s.e.prefix); len(ks) > 0 {
		if err := s.e.rdb.Del(s.ctx, ks...).Err(); err != nil {
			s.fatalf("DEL: %v", err)
		}
	}
}

package throttle_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/throttler/throttler/throttle"
)

// The differential tests replay random traces through the engine and, step
// by step, through golang.org/x/time/rate limiters (the oracle), which the
// engine must match: a job is admitted, reserved or refused exactly when the
// oracle's ReserveN says so at the same time, with the same wait.
//
// The oracle computes in float64 nanoseconds, the engine in exact integer
// microseconds rounded up, so the two may disagree when the oracle's delay
// is within ms of a boundary (zero, or the horizon). Such a step is allowed
// to go either way and the oracle is then brought in line with the engine
// (charged or un-charged), so the traces stay comparable.
const ms = time.Millisecond

// diffSteps is the number of fresh decisions in one trace.
const diffSteps = 3000

// diffTenant is a tenant of a trace with its limits.
type diffTenant struct {
	name   string
	limits throttle.Limits
}

// singleLimitTenants have one limit each, with rates that do and do not
// divide a second evenly.
var singleLimitTenants = []diffTenant{
	{"three", throttle.Limits{throttle.PerSecond(3, 4)}},
	{"seven", throttle.Limits{throttle.PerSecond(7, 3)}},
	{"hourly", throttle.Limits{throttle.PerHour(1000, 5)}},
	{"hundred", throttle.Limits{throttle.PerSecond(100, 10)}},
	{"one", throttle.Limits{throttle.PerSecond(1, 1)}},
}

// multiLimitTenants have two limits each: a short one and a long one.
var multiLimitTenants = []diffTenant{
	{"m-ten", throttle.Limits{throttle.PerSecond(10, 5), throttle.PerMinute(50, 20)}},
	{"m-three", throttle.Limits{throttle.PerSecond(3, 2), throttle.PerHour(1000, 10)}},
	{"m-seven", throttle.Limits{throttle.PerSecond(7, 4), throttle.PerMinute(300, 8)}},
	{"m-fast", throttle.Limits{throttle.PerSecond(20, 5), throttle.PerMinute(600, 30)}},
}

// oracle is one x/time/rate limiter per limit of a tenant.
type oracle []*rate.Limiter

func newOracle(ls throttle.Limits) oracle {
	o := make(oracle, len(ls))
	for i, l := range ls {
		o[i] = rate.NewLimiter(rate.Limit(float64(l.Rate)/l.Period.Seconds()), int(l.Burst))
	}
	return o
}

// reserve charges n tokens at t in every limiter and returns the longest
// delay with the reservations, to cancel them if the job is not charged.
func (o oracle) reserve(t time.Time, n int) (time.Duration, []*rate.Reservation) {
	var delay time.Duration
	rs := make([]*rate.Reservation, len(o))
	for i, lim := range o {
		rs[i] = lim.ReserveN(t, n)
		delay = max(delay, rs[i].DelayFrom(t))
	}
	return delay, rs
}

// cancel undoes reservations made at t by reserve; each is its limiter's
// latest, so every token comes back.
func cancel(rs []*rate.Reservation, t time.Time) {
	for _, r := range rs {
		r.CancelAt(t)
	}
}

// remaining is the number of whole tokens in the emptiest limiter at t.
func (o oracle) remaining(t time.Time) float64 {
	m := math.Inf(1)
	for _, lim := range o {
		m = min(m, math.Floor(lim.TokensAt(t)))
	}
	return max(m, 0)
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// trace replays one random trace and compares every decision.
type trace struct {
	t       *testing.T
	l       *throttle.Limiter
	seed    uint64
	horizon time.Duration
	tenants []diffTenant
	oracles []oracle
	// lastReal and lastAt are, per tenant, the wall-clock and trace time of
	// its previous decision; they only make a failure message diagnosable
	// (a key's TTL runs in wall-clock time, the trace in its own time).
	lastReal []time.Time
	lastAt   []time.Time
	// Counters, for the log and for sanity checks.
	admitted, reserved, refused, tolerated, returns, early int
}

func newTrace(t *testing.T, l *throttle.Limiter, seed uint64, horizon time.Duration, tenants []diffTenant) *trace {
	tr := &trace{t: t, l: l, seed: seed, horizon: horizon, tenants: tenants,
		lastReal: make([]time.Time, len(tenants)), lastAt: make([]time.Time, len(tenants))}
	for _, ten := range tenants {
		tr.oracles = append(tr.oracles, newOracle(ten.limits))
	}
	return tr
}

// step is one fresh job of a trace.
type step struct {
	i      int
	at     time.Time
	tenant int
	cost   int
	jobID  string
}

func (s step) request(ten diffTenant) throttle.Request {
	return throttle.Request{Tenant: ten.name, JobID: s.jobID, Cost: int64(s.cost), At: s.at}
}

// fatalf fails the test, naming the seed and the step.
func (tr *trace) fatalf(s step, format string, args ...any) {
	tr.t.Helper()
	ten := s.tenant
	tr.t.Fatalf("seed %d, step %d (tenant %s %v, cost %d, job %q, at t0+%s; tenant's previous step %s earlier in trace time, %s in wall-clock time): %s",
		tr.seed, s.i, tr.tenants[ten].name, tr.tenants[ten].limits, s.cost, s.jobID, s.at.Sub(t0),
		s.at.Sub(tr.lastAt[ten]), time.Since(tr.lastReal[ten]), fmt.Sprintf(format, args...))
}

// check compares the engine's decision d for the fresh job s with the
// oracle, charging the oracle as the engine was charged.
func (tr *trace) check(s step, d throttle.Decision) {
	tr.t.Helper()
	o := tr.oracles[s.tenant]
	delay, rs := o.reserve(s.at, s.cost)
	// x/time/rate: ReserveN always succeeds for cost <= burst; the job is
	// charged iff it may run within the horizon (AllowN when horizon is 0).
	charged := delay <= tr.horizon
	if !charged {
		cancel(rs, s.at)
	}
	engineCharged := d.Outcome == throttle.Admitted || d.Outcome == throttle.Reserved
	nearBoundary := delay <= ms || (tr.horizon > 0 && abs(delay-tr.horizon) <= ms)
	defer func() { tr.lastReal[s.tenant], tr.lastAt[s.tenant] = time.Now(), s.at }()

	if engineCharged != charged {
		if !nearBoundary {
			tr.fatalf(s, "engine %+v, oracle delay %s with horizon %s: charged %v, oracle charged %v", d, delay, tr.horizon, engineCharged, charged)
		}
		// Rounding at a boundary: follow the engine.
		tr.tolerated++
		if engineCharged {
			o.reserve(s.at, s.cost)
		} else {
			cancel(rs, s.at)
		}
		return
	}

	switch {
	case d.Outcome == throttle.Admitted:
		tr.admitted++
		if d.Wait != 0 {
			tr.fatalf(s, "fresh job admitted as %+v, want Wait 0", d)
		}
		if delay > ms {
			tr.fatalf(s, "engine admitted, oracle delay %s", delay)
		}
		if delay == 0 {
			// The engine floors exact token counts, the oracle floors floats:
			// they may differ by one at a whole number of tokens.
			if want := o.remaining(s.at); math.Abs(float64(d.Remaining)-want) > 1 {
				tr.fatalf(s, "engine admitted with Remaining %d, oracle has %.0f tokens", d.Remaining, want)
			}
		}
	case d.Outcome == throttle.Reserved:
		tr.reserved++
		if abs(d.Wait-delay) > ms {
			tr.fatalf(s, "reserved with Wait %s, oracle delay %s", d.Wait, delay)
		}
		if d.Wait <= 0 || d.Wait > tr.horizon || d.Remaining != 0 {
			tr.fatalf(s, "reserved as %+v, want 0 < Wait <= horizon %s and Remaining 0", d, tr.horizon)
		}
	default:
		tr.refused++
		if d.Outcome != throttle.Limited {
			tr.fatalf(s, "decision %+v, want admitted, reserved or limited", d)
		}
		if s.jobID != "" && tr.horizon > 0 {
			if d.Wait != tr.horizon {
				tr.fatalf(s, "limited past the horizon with Wait %s, want the horizon %s (oracle delay %s)", d.Wait, tr.horizon, delay)
			}
		} else if abs(d.Wait-delay) > ms {
			tr.fatalf(s, "limited with Wait %s, oracle delay %s", d.Wait, delay)
		}
		if delay <= tr.horizon-ms {
			tr.fatalf(s, "limited uncharged, but the oracle's delay %s is within the horizon %s", delay, tr.horizon)
		}
	}
}

// event is a reserved job coming back, early or at its slot.
type event struct {
	at    time.Time
	slot  time.Time
	s     step
	early bool
}

// runSequential replays a trace with one Decide call per job. Reserved jobs
// come back at their slot (and some also before it); a return must be
// admitted once, without a second charge: the oracle is not charged for it,
// and every later fresh decision must still match.
func (tr *trace) runSequential(rng *rand.Rand) {
	tr.t.Helper()
	var pending []event
	now := t0
	for i := range diffSteps {
		now = now.Add(time.Duration(rng.IntN(50_001)) * time.Microsecond)
		// Jobs whose time has come return first, in time order.
		for {
			j := slices.IndexFunc(pending, func(e event) bool { return !e.at.After(now) })
			if j < 0 {
				break
			}
			for k, e := range pending {
				if !e.at.After(now) && e.at.Before(pending[j].at) {
					j = k
				}
			}
			e := pending[j]
			pending = slices.Delete(pending, j, j+1)
			tr.comeBack(e)
		}

		s := step{i: i, at: now, tenant: rng.IntN(len(tr.tenants)), jobID: "s" + strconv.Itoa(i)}
		ten := tr.tenants[s.tenant]
		s.cost = 1 + rng.IntN(int(ten.limits.MinBurst()))
		if tr.horizon == 0 && rng.IntN(2) == 0 {
			s.jobID = "" // without a horizon, a job id must change nothing
		}
		d := decide(tr.t, tr.l, s.request(ten))
		tr.check(s, d)
		if d.Outcome == throttle.Reserved {
			slot := now.Add(d.Wait)
			pending = append(pending, event{at: slot, slot: slot, s: s})
			if d.Wait > time.Microsecond && rng.IntN(3) == 0 {
				early := now.Add(time.Duration(1+rng.Int64N(int64(d.Wait/time.Microsecond)-1)) * time.Microsecond)
				pending = append(pending, event{at: early, slot: slot, s: s, early: true})
			}
		}
	}
}

// comeBack sends a reserved job again and checks the answer.
func (tr *trace) comeBack(e event) {
	tr.t.Helper()
	req := e.s.request(tr.tenants[e.s.tenant])
	req.At = e.at
	d := decide(tr.t, tr.l, req)
	if e.early {
		tr.early++
		want := reserved(e.slot.Sub(e.at))
		if d != want {
			tr.fatalf(e.s, "came back %s before its slot: got %+v, want %+v", e.slot.Sub(e.at), d, want)
		}
		return
	}
	tr.returns++
	if d != admitted(0) {
		tr.fatalf(e.s, "came back at its slot t0+%s: got %+v, want admitted through its slot (Remaining 0)", e.at.Sub(t0), d)
	}
}

// runBatched replays a trace in DecideBatch calls of batch jobs each.
// Reserved jobs do not come back.
func (tr *trace) runBatched(rng *rand.Rand, batch int) {
	tr.t.Helper()
	now := t0
	for i := 0; i < diffSteps; i += batch {
		steps := make([]step, 0, batch)
		reqs := make([]throttle.Request, 0, batch)
		for k := i; k < min(i+batch, diffSteps); k++ {
			now = now.Add(time.Duration(rng.IntN(50_001)) * time.Microsecond)
			s := step{i: k, at: now, tenant: rng.IntN(len(tr.tenants)), jobID: "s" + strconv.Itoa(k)}
			s.cost = 1 + rng.IntN(int(tr.tenants[s.tenant].limits.MinBurst()))
			steps = append(steps, s)
			reqs = append(reqs, s.request(tr.tenants[s.tenant]))
		}
		results := tr.l.DecideBatch(context.Background(), reqs)
		for k, r := range results {
			if r.Err != nil {
				tr.fatalf(steps[k], "DecideBatch: %v", r.Err)
			}
			tr.check(steps[k], r.Decision)
		}
	}
}

// runDifferential runs one trace against a fresh server.
func runDifferential(t *testing.T, tenants []diffTenant, horizon time.Duration, batch int) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))

	e := setup(t)
	rules := throttle.Rules{Default: throttle.Enforce(throttle.PerSecond(1, 1)), Tenants: map[string]throttle.Policy{}}
	for _, ten := range tenants {
		rules.Tenants[ten.name] = throttle.Policy{Limits: ten.limits}
	}
	l, err := throttle.New(e.rdb, throttle.Options{Policies: rules, Horizon: horizon, Prefix: e.prefix})
	if err != nil {
		t.Fatalf("throttle.New: %v", err)
	}
	tr := newTrace(t, l, seed, horizon, tenants)
	if batch == 0 {
		tr.runSequential(rng)
	} else {
		tr.runBatched(rng, batch)
	}
	t.Logf("admitted %d, reserved %d, refused %d, tolerated at a boundary %d, came back at slot %d, early %d",
		tr.admitted, tr.reserved, tr.refused, tr.tolerated, tr.returns, tr.early)

	// The trace must have exercised every outcome, and boundary cases must
	// stay rare: a systematic difference would show up here.
	if tr.admitted == 0 || tr.refused == 0 || (horizon > 0 && tr.reserved == 0) {
		t.Fatalf("trace too tame: admitted %d, reserved %d, refused %d", tr.admitted, tr.reserved, tr.refused)
	}
	// Every reserved job whose slot fell within the trace came back; slots
	// past the last step are left pending.
	if batch == 0 && horizon > 0 && (tr.returns == 0 || tr.returns > tr.reserved) {
		t.Fatalf("%d jobs came back at their slot of %d reserved", tr.returns, tr.reserved)
	}
	if tr.tolerated > diffSteps/100 {
		t.Fatalf("%d of %d decisions differed from the oracle at a rounding boundary; want at most 1%%", tr.tolerated, diffSteps)
	}
}

func TestDifferential(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tenants []diffTenant
		horizon time.Duration
		batch   int
	}{
		{"single/horizon-0", singleLimitTenants, 0, 0},
		{"single/horizon-300ms", singleLimitTenants, 300 * ms, 0},
		{"single/horizon-2s", singleLimitTenants, 2 * time.Second, 0},
		{"single/horizon-2s/batch-50", singleLimitTenants, 2 * time.Second, 50},
		{"single/horizon-0/batch-50", singleLimitTenants, 0, 50},
		{"multi/horizon-0", multiLimitTenants, 0, 0},
		{"multi/horizon-1s", multiLimitTenants, time.Second, 0},
		{"multi/horizon-1s/batch-64", multiLimitTenants, time.Second, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runDifferential(t, tc.tenants, tc.horizon, tc.batch)
		})
	}
}

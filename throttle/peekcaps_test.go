package throttle_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// The running caps have no wait to predict, but their counts say whether
// a job arriving now would wait for a lease, and behind how many: Peek's
// (and PeekFleet's) Running + Called are the leases the next call counts,
// and Waiting the jobs it finds in line. TestPeekCapsAgreeWithAdmit holds
// them to what admit decides, after random sequences of jobs admitted,
// capped, called and back (or not back in time), runs finished, leases
// expired and caps poked, at explicit times.

// capRuns and capSteps size a run of the test.
const (
	capRuns  = 12
	capSteps = 50
)

// capTenants are the tenants of a cap sequence.
var capTenants = []string{"acme", "bolt"}

func TestPeekCapsAgreeWithAdmit(t *testing.T) {
	base, runs := peekSeeds(t, capRuns)
	e := setup(t)
	var capped, admitted, passed, fairAhead int
	for i := range runs {
		s := newCapSeq(t, e, base+uint64(i), fmt.Sprintf("%s_%d", e.prefix, i))
		for range capSteps {
			s.step()
			s.check()
		}
		capped, admitted = capped+s.capped, admitted+s.admitted
		passed, fairAhead = passed+s.passed, fairAhead+s.fairAhead
		if ks := keys(t, e.rdb, e.prefix); len(ks) > 0 {
			if err := e.rdb.Del(context.Background(), ks...).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%d steps: the next job capped %d times, admitted %d (past jobs in line %d); behind some of the fleet's line %d",
		runs*capSteps, capped, admitted, passed, fairAhead)
	if runs > 1 && (capped == 0 || admitted == 0) {
		t.Fatalf("the sequences missed a case: capped %d, admitted %d", capped, admitted)
	}
}

// capSeq is one random sequence of jobs under running caps.
type capSeq struct {
	t                *testing.T
	e                env
	ctx              context.Context
	rng              *rand.Rand
	seed             uint64
	at               time.Time
	inc              int64
	fleet            int64 // the fleet's cap, 0 for none
	running          map[string]int64
	main, probe      *engine
	mainL            *throttle.Limiter
	mainP, probeP    string
	runs             [][]throttle.Lease // the leases of the jobs running
	called           []throttle.Waiter  // the jobs called and not yet back
	log              []string
	capped, admitted int
	// passed counts new jobs admitted past jobs in line (room for all);
	// fairAhead new jobs behind fewer than all in the fleet's line.
	passed, fairAhead int
}

func newCapSeq(t *testing.T, e env, seed uint64, prefix string) *capSeq {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x5851f42d4c957f2d))
	s := &capSeq{t: t, e: e, ctx: context.Background(), rng: rng, seed: seed, at: t0,
		mainP: prefix + "m", probeP: prefix + "p", running: map[string]int64{}}
	rules := throttle.Rules{Default: throttle.Enforce(throttle.PerMinute(100_000, 1000)), Tenants: map[string]throttle.Policy{}}
	for _, ten := range capTenants {
		s.running[ten] = 1 + rng.Int64N(3)
		rules.Tenants[ten] = throttle.Policy{Limits: throttle.Limits{throttle.PerMinute(100_000, 1000)}, Running: s.running[ten]}
	}
	if rng.IntN(2) == 0 {
		s.fleet = 2 + rng.Int64N(3)
	}
	opts := throttle.CapOptions{MaxRunning: s.fleet, LeaseTTL: 3 * time.Second, CallTTL: 2 * time.Second,
		At: func() time.Time { return s.at }}
	for _, c := range []struct {
		p   string
		out **engine
	}{{s.mainP, &s.main}, {s.probeP, &s.probe}} {
		l, err := throttle.New(e.rdb, throttle.Options{Policies: rules, Horizon: time.Hour, Prefix: c.p})
		if err != nil {
			t.Fatal(err)
		}
		if *c.out, err = newEngine(t, l).withCaps(l, opts); err != nil {
			t.Fatal(err)
		}
		if c.p == s.mainP {
			s.mainL = l
		}
	}
	s.logf("caps %v, fleet %d", s.running, s.fleet)
	return s
}

func (s *capSeq) logf(format string, args ...any) {
	s.log = append(s.log, fmt.Sprintf("t0+%s: ", s.at.Sub(t0))+fmt.Sprintf(format, args...))
}

func (s *capSeq) fatalf(format string, args ...any) {
	s.t.Helper()
	steps := s.log
	if len(steps) > 40 {
		steps = steps[len(steps)-40:]
	}
	s.t.Fatalf("seed %d (replay: %s=%d), step %d: %s\nsteps (last 40):\n  %s",
		s.seed, peekSeedEnv, s.seed, len(s.log)-1, fmt.Sprintf(format, args...), strings.Join(steps, "\n  "))
}

// decide decides one incarnation of a job and notes what it holds.
func (s *capSeq) decide(tenant, id string) {
	s.t.Helper()
	s.inc++
	r := s.main.DecideBatch(s.ctx, []throttle.Copy{{Request: throttle.Request{Tenant: tenant, JobID: id, At: s.at}, Incarnation: s.inc}})[0]
	if r.Err != nil {
		s.fatalf("Decide %s/%s: %v", tenant, id, r.Err)
	}
	if r.Outcome == throttle.Admitted {
		s.runs = append(s.runs, r.Leases())
	}
	s.wake(r.Wake)
	s.logf("%s/%s: %v (%s ahead %d running %d), woke %v", tenant, id, r.Outcome, r.CappedBy, r.Ahead, r.Running, r.Wake)
}

// wake notes the jobs called, to bring back (or not) later.
func (s *capSeq) wake(ws []throttle.Waiter) {
	for _, w := range ws {
		if !slices.Contains(s.called, w) {
			s.called = append(s.called, w)
		}
	}
}

// step takes one random step: a job, a called job back, a run finished,
// a poke, or time passing (past the call TTL, the lease TTL).
func (s *capSeq) step() {
	s.t.Helper()
	switch k := s.rng.IntN(100); {
	case k < 40:
		s.decide(capTenants[s.rng.IntN(len(capTenants))], fmt.Sprint("j", s.rng.IntN(8)))
	case k < 55 && len(s.called) > 0:
		i := s.rng.IntN(len(s.called))
		w := s.called[i]
		s.called = slices.Delete(s.called, i, i+1)
		s.decide(w.Tenant, w.JobID)
	case k < 75 && len(s.runs) > 0:
		i := s.rng.IntN(len(s.runs))
		ls := s.runs[i]
		s.runs = slices.Delete(s.runs, i, i+1)
		ws, err := s.main.Finish(s.ctx, ls)
		if err != nil {
			s.fatalf("Finish: %v", err)
		}
		s.wake(ws)
		s.logf("finished %v, woke %v", ls, ws)
	case k < 82:
		ws, err := s.main.Poke(s.ctx, append(slices.Clone(capTenants), ""))
		if err != nil {
			s.fatalf("Poke: %v", err)
		}
		s.wake(ws)
		s.logf("poked, woke %v", ws)
	default:
		d := []time.Duration{time.Microsecond, 700 * time.Millisecond, 1500 * time.Millisecond, 2 * time.Second, 2500 * time.Millisecond, 3500 * time.Millisecond}[s.rng.IntN(6)]
		s.at = s.at.Add(d)
		s.logf("time passes")
	}
}

// check compares Peek's and PeekFleetFor's counts with the decision of a
// new job of each tenant, decided on a copy of the keys.
func (s *capSeq) check() {
	s.t.Helper()
	if err := freezeKeys(s.ctx, s.e.rdb, s.mainP); err != nil {
		s.fatalf("%v", err)
	}
	var all *throttle.CapSnapshot
	if s.fleet > 0 {
		var err error
		if all, err = s.mainL.PeekFleet(s.ctx, s.at); err != nil {
			s.fatalf("PeekFleet: %v", err)
		}
		if all.Ahead != all.Waiting {
			s.fatalf("PeekFleet: %+v, want every job in line ahead", *all)
		}
	}
	for _, ten := range capTenants {
		snap, err := s.mainL.Peek(s.ctx, ten, s.at)
		if err != nil {
			s.fatalf("Peek %s: %v", ten, err)
		}
		if err := copyKeys(s.ctx, s.e.rdb, s.mainP, s.probeP); err != nil {
			s.fatalf("%v", err)
		}
		r := s.probe.DecideBatch(s.ctx, []throttle.Copy{{Request: throttle.Request{Tenant: ten, JobID: "probe", At: s.at}, Incarnation: 1 << 40}})[0]
		if r.Err != nil {
			s.fatalf("probe %s: %v", ten, r.Err)
		}
		d := r.Decision
		if s.fleet > 0 {
			fleet, err := s.mainL.PeekFleetFor(s.ctx, ten, s.at)
			if err != nil {
				s.fatalf("PeekFleetFor %s: %v", ten, err)
			}
			if same := *fleet; same.Ahead != all.Ahead {
				same.Ahead = all.Ahead
				if same != *all {
					s.fatalf("PeekFleetFor %s gives %+v, PeekFleet %+v", ten, *fleet, *all)
				}
			}
			live := int64(fleet.Running + fleet.Called)
			byFleet := d.CappedBy == fmt.Sprint("max running:", s.fleet)
			if fleet.Full(s.fleet) != byFleet || (byFleet && (d.Running != live || d.Ahead != int64(fleet.Ahead))) {
				s.fatalf("a new job of %s: %+v; PeekFleetFor gives %+v (cap %d, full %v)", ten, d, *fleet, s.fleet, fleet.Full(s.fleet))
			}
			if fleet.Ahead < fleet.Waiting {
				s.fairAhead++
			}
			if byFleet {
				s.capped++
				continue
			}
		}
		c := snap.Cap
		n := s.running[ten]
		live := int64(c.Running + c.Called)
		if c.Ahead != c.Waiting {
			s.fatalf("Peek %s: %+v, want every job in line ahead", ten, *c)
		}
		if c.Full(n) {
			if d.Outcome != throttle.Capped || d.CappedBy != fmt.Sprint("running:", n) || d.Running != live || d.Ahead != int64(c.Ahead) {
				s.fatalf("a new job of %s: %+v; Peek gives %+v (cap %d): capped behind %d with %d counted", ten, d, *c, n, c.Ahead, live)
			}
			s.capped++
			continue
		}
		if d.Outcome != throttle.Admitted {
			s.fatalf("a new job of %s: %+v; Peek gives %+v (cap %d): room", ten, d, *c, n)
		}
		s.admitted++
		if c.Waiting > 0 {
			s.passed++
		}
	}
}

package throttle_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// randPolicies is a Policies a randomized test changes as it runs, as a
// store of live limits does.
type randPolicies struct {
	mu sync.Mutex
	m  map[string]throttle.Policy
}

func (p *randPolicies) Policy(tenant string) throttle.Policy {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[tenant]
}

func (p *randPolicies) set(tenant string, pol throttle.Policy) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m[tenant] = pol
}

// randomPolicy draws a policy for a chaos tenant: one or two limits
// (periods of 1 s and 1 min, so that a new rate names the same bucket and
// a new period another one), sometimes a running cap, sometimes shadowed.
// Every burst is at least 5, the highest cost the test sends.
func randomPolicy(rng *rand.Rand) throttle.Policy {
	pol := throttle.Policy{Limits: throttle.Limits{throttle.PerSecond(int64(5+rng.IntN(40)), int64(5+rng.IntN(20)))}}
	if rng.IntN(2) == 0 {
		pol.Limits = append(pol.Limits, throttle.PerMinute(int64(50+rng.IntN(500)), int64(5+rng.IntN(50))))
	}
	if rng.IntN(3) == 0 {
		pol.Limits[0] = throttle.Limit{Rate: int64(5 + rng.IntN(40)), Period: 2 * time.Second, Burst: int64(5 + rng.IntN(20))}
	}
	if rng.IntN(3) == 0 {
		pol.Running = int64(1 + rng.IntN(4))
	}
	pol.Shadow = rng.IntN(8) == 0
	return pol
}

// TestRandomizedAPI drives the public API of throttle against a real
// redis-server with random batches at explicit times: tenants whose
// limits change live (rate, period, limits added and removed, running
// caps on and off, shadow), per-request limits of the same period at
// other rates, random costs and job ids, leases finished, renewed and
// poked, holds. Beside them, in the same batches, tenants of fixed
// limits are checked step by step against golang.org/x/time/rate (by the
// Limiter, in the same calls as chaos requests without job ids). No
// call may fail while Redis is up, and no key may be left without a TTL.
// THROTTLER_RANDOM_SEED replays one seed.
func TestRandomizedAPI(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("THROTTLER_RANDOM_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("THROTTLER_RANDOM_SEED: %v", err)
		}
	}
	t.Logf("seed %d (THROTTLER_RANDOM_SEED=%d replays it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	ctx := context.Background()

	const horizon = 2 * time.Second
	e := setup(t)
	pols := &randPolicies{m: map[string]throttle.Policy{}}
	checked := singleLimitTenants
	for _, ten := range checked {
		pols.set(ten.name, throttle.Policy{Limits: ten.limits})
	}
	chaos := []string{"c0", "c1", "c2", "c3", "c4", "c5"}
	for _, ten := range chaos {
		pols.set(ten, randomPolicy(rng))
	}
	l, err := throttle.New(e.rdb, throttle.Options{Policies: pols, Horizon: horizon, Prefix: e.prefix})
	if err != nil {
		t.Fatal(err)
	}
	copies, err := makeEngine(l, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	c, err := copies.withCaps(l, throttle.CapOptions{MaxRunning: 40, LeaseTTL: 3 * time.Second, CallTTL: time.Second,
		At: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	tr := newTrace(t, l, seed, horizon, checked)
	fail := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("seed %d, at t0+%s: %s: %v", seed, now.Sub(t0), what, err)
		}
	}

	var running []throttle.Lease
	inc := int64(0)
	steps := 0
	// Redis expires a bucket's state by its own clock, at the instant the
	// trace's time says it is full: between two decisions the trace's time
	// must pass at least as fast as the wall clock's, or a state could
	// vanish before it is full (a slow machine makes rounds slower than
	// their steps).
	lastAt, lastWall := now, time.Now()
	for round := range 400 {
		now = now.Add(time.Duration(rng.IntN(60_001)) * time.Microsecond)

		// A live change of a chaos tenant's limits, carried over as the
		// worker carries a changed period.
		if rng.IntN(6) == 0 {
			ten := chaos[rng.IntN(len(chaos))]
			from, to := pols.Policy(ten), randomPolicy(rng)
			fail("Carry", l.Carry(ctx, ten, from, to, now))
			pols.set(ten, to)
		}
		// A downstream hold.
		if rng.IntN(15) == 0 {
			fail("HoldAt", l.HoldAt(ctx, chaos[rng.IntN(len(chaos))], now, now.Add(time.Duration(rng.IntN(3000))*time.Millisecond)))
		}

		// Since the last decisions, at least as much time in the trace as
		// on the wall clock (the calls above may have taken a while).
		if caught := lastAt.Add(time.Since(lastWall)); now.Before(caught) {
			now = caught
		}
		lastAt, lastWall = now, time.Now()
		var batch []throttle.Copy
		var stepOf []int // per plain request, its checked step's index, or -1
		var checkedSteps []step
		var plain []throttle.Request
		// About 70 checked jobs a second against their tenants' 111: some
		// admitted, some reserved, some refused.
		for range rng.IntN(5) {
			s := step{i: steps, at: now, tenant: rng.IntN(len(checked)), jobID: "s" + strconv.Itoa(steps)}
			steps++
			s.cost = 1 + rng.IntN(int(checked[s.tenant].limits.MinBurst()))
			plain = append(plain, s.request(checked[s.tenant]))
			stepOf = append(stepOf, len(checkedSteps))
			checkedSteps = append(checkedSteps, s)
		}
		for range 1 + rng.IntN(48) {
			inc++
			ten := chaos[rng.IntN(len(chaos))]
			req := throttle.Request{Tenant: ten, Cost: int64(1 + rng.IntN(5)), At: now, JobID: fmt.Sprintf("r%d", inc)}
			if rng.IntN(5) == 0 {
				// The same periods as its policy, at other rates.
				for _, lim := range pols.Policy(ten).Limits {
					req.Limits = append(req.Limits, throttle.Limit{Rate: int64(1 + rng.IntN(60)), Period: lim.Period, Burst: int64(5 + rng.IntN(20))})
				}
			}
			if rng.IntN(4) == 0 {
				// No job id: the Limiter's own decision, nothing reserved.
				req.JobID = ""
				plain = append(plain, req)
				stepOf = append(stepOf, -1)
				continue
			}
			batch = append(batch, throttle.Copy{Request: req, Incarnation: inc, Fresh: rng.IntN(2) == 0, Order: inc})
		}
		for k, r := range l.DecideBatch(ctx, plain) {
			fail(fmt.Sprintf("round %d, request %d (%+v)", round, k, plain[k]), r.Err)
			if s := stepOf[k]; s >= 0 {
				tr.check(checkedSteps[s], r.Decision)
			}
		}
		for k, r := range c.DecideBatch(ctx, batch) {
			fail(fmt.Sprintf("round %d, copy %d (%+v)", round, k, batch[k].Request), r.Err)
			running = append(running, r.Leases()...)
		}

		// Leases: some runs end, the others are renewed; caps are poked.
		if len(running) > 0 {
			n := len(running) - rng.IntN(min(4, len(running)+1))
			_, err := c.Finish(ctx, running[:n])
			fail("Finish", err)
			running = running[n:]
		}
		if rng.IntN(4) == 0 {
			_, err := c.Renew(ctx, running)
			fail("Renew", err)
		}
		if rng.IntN(4) == 0 {
			_, err := c.Poke(ctx, append(chaos, ""))
			fail("Poke", err)
		}
	}
	t.Logf("%d checked steps: admitted %d, reserved %d, refused %d, tolerated at a boundary %d",
		steps, tr.admitted, tr.reserved, tr.refused, tr.tolerated)
	if tr.admitted == 0 || tr.reserved == 0 || tr.refused == 0 {
		t.Fatalf("checked tenants too tame: admitted %d, reserved %d, refused %d", tr.admitted, tr.reserved, tr.refused)
	}
	if tr.tolerated > steps/100+1 {
		t.Fatalf("%d of %d checked decisions differed at a rounding boundary", tr.tolerated, steps)
	}
	noKeyWithoutTTL(t, e.rdb, e.prefix)
}

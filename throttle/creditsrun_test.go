package throttle_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

// TestCreditsConcurrent decides jobs of cost 1 to 5 from many goroutines
// against a balance of 1,000, three times as much cost as it holds: the
// cost admitted is never above 1,000, the balance left is 1,000 less it,
// every job ahead of the first waiting one was admitted, and what is left
// cannot cover that one.
func TestCreditsConcurrent(t *testing.T) {
	ce := newCreditEnv(t, "100000/s:100000+credits")
	ce.add(t, "a", 1000)
	const workers, jobs, perBatch = 8, 1000, 4
	cost := func(order int64) int64 { return 1 + order%5 }
	var next atomic.Int64
	var mu sync.Mutex
	admitted := map[int64]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				first := next.Add(perBatch) - perBatch + 1
				if first > jobs {
					return
				}
				var copies []throttle.Copy
				for o := first; o < first+perBatch; o++ {
					copies = append(copies, throttle.Copy{Request: throttle.Request{Tenant: "a", JobID: fmt.Sprint("j", o), Cost: cost(o)},
						Incarnation: o, Order: o, Fresh: true})
				}
				for i, r := range ce.e.DecideBatch(context.Background(), copies) {
					if r.Err != nil {
						errs <- r.Err
						return
					}
					if r.Outcome == throttle.Admitted {
						mu.Lock()
						admitted[copies[i].Order] = true
						mu.Unlock()
					} else if r.Outcome != throttle.Unfunded {
						errs <- fmt.Errorf("job %d: %+v", copies[i].Order, r.Decision)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var sum int64
	for o := range admitted {
		sum += cost(o)
	}
	b := ce.balance(t, "a")
	q := b.WaitingFrom
	if sum > 1000 || b.Balance != 1000-sum || q == 0 || cost(q) <= b.Balance {
		t.Fatalf("admitted %d cost in %d jobs, balance %+v (first waiting costs %d)", sum, len(admitted), b, cost(q))
	}
	for o := int64(1); o < q; o++ {
		if !admitted[o] {
			t.Fatalf("job %d, ahead of the first waiting (%d), not admitted", o, q)
		}
	}
	t.Logf("admitted %d cost in %d jobs; %d left, first waiting %d (cost %d)", sum, len(admitted), b.Balance, q, cost(q))
}

// TestCreditsRedisRestart restarts Redis empty mid-run: the balance is
// gone, and no job is admitted until credits are added again.
func TestCreditsRedisRestart(t *testing.T) {
	ce := newCreditEnv(t, "100000/s:100000+credits")
	ctx := context.Background()
	ce.add(t, "a", 10)
	job := func(id string) throttle.Result {
		return ce.e.DecideBatch(ctx, []throttle.Copy{{Request: throttle.Request{Tenant: "a", JobID: id, Cost: 4}, Incarnation: 1, Fresh: true}})[0]
	}
	if r := job("j1"); r.Err != nil || r.Outcome != throttle.Admitted {
		t.Fatalf("j1 before the restart: %+v", r)
	}
	ce.srv.Restart(t)
	testenv.Eventually(t, 10*time.Second, "a read of the balance after the restart", func() bool {
		_, err := ce.l.Credits(ctx, "a")
		return err == nil
	})
	if b := ce.balance(t, "a"); b.Exists || !b.Trusted || b.Balance != 0 {
		t.Fatalf("balance after an empty restart: %+v", b)
	}
	for _, id := range []string{"j1", "j2", "j3"} {
		if r := job(id); r.Err != nil || r.Outcome != throttle.Unfunded || r.Untrusted || r.Wait != 0 {
			t.Fatalf("%s after the restart: %+v", id, r)
		}
	}
	ce.add(t, "a", 5)
	if r := job("j2"); r.Err != nil || r.Outcome != throttle.Admitted {
		t.Fatalf("j2 after a top-up: %+v", r)
	}
	if r := job("j3"); r.Err != nil || r.Outcome != throttle.Unfunded {
		t.Fatalf("j3 past the top-up: %+v", r)
	}
	if b := ce.balance(t, "a"); b.Balance != 1 || !b.Trusted {
		t.Fatalf("balance: %+v, want 1", b)
	}
}

// TestCreditsUntrusted: a balance written on a Redis of another replid
// (before a restart with its data, or a failover) admits nothing, and
// AddCredits replaces it.
func TestCreditsUntrusted(t *testing.T) {
	ce := newCreditEnv(t, "credits")
	ctx := context.Background()
	ce.add(t, "a", 10)
	bk, _ := throttle.CreditsKeys(ce.prefix, "a", "")
	if err := ce.rdb.HSet(ctx, bk, "r", "0123456789abcdef0123456789abcdef01234567").Err(); err != nil {
		t.Fatal(err)
	}
	if b := ce.balance(t, "a"); !b.Exists || b.Trusted || b.Balance != 10 {
		t.Fatalf("a balance of another replid: %+v", b)
	}
	d := ce.decideOK(t, cp("a", "j1", 1, 1, 0), cp("a", "j2", 1, 2, 0))
	for i := range d {
		if d[i] != (throttle.Decision{Outcome: throttle.Unfunded, Balance: 10, Untrusted: true}) {
			t.Fatalf("job %d against an untrusted balance: %+v", i, d[i])
		}
	}
	if b := ce.balance(t, "a"); b.Balance != 10 || b.WaitingFrom != 0 {
		t.Fatalf("balance after refusals: %+v, want it untouched", b)
	}
	c := ce.add(t, "a", 3)
	if c.Before.Trusted || c.Before.Balance != 10 || c.After.Balance != 3 || !c.After.Trusted {
		t.Fatalf("AddCredits over an untrusted balance: %+v", c)
	}
	d = ce.decideOK(t, cp("a", "j1", 2, 1, 0), cp("a", "j2", 2, 2, 0))
	if d[0].Outcome != throttle.Admitted || d[1] != (throttle.Decision{Outcome: throttle.Unfunded, Balance: 1}) {
		t.Fatalf("after the top-up: %+v", d)
	}
	// A marker written before still says the job paid: j1 passes, the
	// balance untrusted or not.
	ce.rdb.HSet(ctx, bk, "r", "x")
	if d := ce.decideOK(t, cp("a", "j1", 2, 1, 0)); d[0].Outcome != throttle.Admitted {
		t.Fatalf("a paid job against an untrusted balance: %+v", d[0])
	}
}

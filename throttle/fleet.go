package throttle

import "context"

// admitFleet takes a lease of the fleet's cap for every copy, in one round
// trip (none when there is no fleet's cap): it records the leases taken in fleet and the decisions of the
// copies the fleet's cap made wait in results, gives up the owner records
// of those (giveUpCapped), and returns the indices of the copies that go
// on to their tenants' caps and rates.
func (c *RunningCaps) admitFleet(ctx context.Context, copies []Copy, results []Result, fleet []*Lease) []int {
	pending := make([]int, 0, len(copies))
	if c.o.MaxRunning <= 0 {
		for i := range copies {
			pending = append(pending, i)
		}
		return pending
	}
	var preps []prepared
	var idx []int
	var tenants []string
	for i, cp := range copies {
		p, err := c.prepareFleet(cp)
		if err != nil {
			results[i].Err = err
			continue
		}
		preps, idx, tenants = append(preps, p), append(idx, i), append(tenants, cp.Tenant)
	}
	for k, r := range c.admitEach(ctx, preps, tenants) {
		i := idx[k]
		results[i].Wake = append(results[i].Wake, r.Wake...)
		switch {
		case r.Err != nil:
			results[i].Err = r.Err
		case r.Outcome != Admitted:
			results[i].Decision = r.Decision
		default:
			fleet[i] = &r.Lease
			pending = append(pending, i)
		}
	}
	giveUpCapped(ctx, c.l, copies, results)
	return pending
}

// giveBackFleet hands each admitted copy its lease of the fleet's cap
// (Decision.FleetLease) and gives back, in one round trip, those of the
// copies not admitted.
func (c *RunningCaps) giveBackFleet(ctx context.Context, results []Result, fleet []*Lease) {
	var back []Lease
	var backOf []int
	for i, ls := range fleet {
		if ls == nil {
			continue
		}
		if results[i].Err == nil && results[i].Outcome == Admitted {
			results[i].FleetLease = *ls
			continue
		}
		back, backOf = append(back, *ls), append(backOf, i)
	}
	if len(back) > 0 {
		// Woken jobs go with the first copy that gave its lease back: the
		// caller wakes every Wake of a batch alike.
		// The leases that could not be given back expire by themselves
		// after LeaseTTL: nothing is lost, the fleet runs fewer meanwhile.
		wake, _ := c.Finish(ctx, back)
		results[backOf[0]].Wake = append(results[backOf[0]].Wake, wake...)
	}
}

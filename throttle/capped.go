package throttle

import (
	"context"
	"strconv"
)

// decideCapped is DecideBatch when running caps apply: the fleet's cap
// first (a round trip), then the tenants' caps and rates (one more: the
// capped copies' admit calls ride in the pipeline of the others' decide
// calls), then the fleet's leases of copies not admitted go back (one
// more, only when there are any).
func (d *Decider) decideCapped(ctx context.Context, copies []Copy) []Result {
	results := make([]Result, len(copies))
	fleet := make([]*Lease, len(copies))
	var pending []int
	if d.caps.o.MaxRunning > 0 {
		pending = d.fleetRound(ctx, copies, results, fleet)
		d.giveUpOwners(ctx, copies, results)
	} else {
		pending = make([]int, 0, len(copies))
		for i := range copies {
			pending = append(pending, i)
		}
	}

	var plain []int // decided by decide
	var calls []fcall
	var idx []int
	var preps []prepared
	for _, i := range pending {
		pol := d.l.policies.Policy(copies[i].Tenant)
		if pol.Running == 0 || pol.Shadow {
			plain = append(plain, i)
			continue
		}
		p, err := d.prepareCapped(copies[i], pol)
		if err != nil {
			results[i].Err = err
			continue
		}
		calls, idx, preps = append(calls, d.caps.admitCall(p, copies[i].Tenant)), append(idx, i), append(preps, p)
	}
	decided := d.l.decideBatchWith(ctx, len(plain), func(k int) (prepared, error) { return d.prepare(copies[plain[k]]) }, calls)
	for k, i := range plain {
		results[i].Decision, results[i].Err = decided[k].Decision, decided[k].Err
	}
	for k, f := range calls {
		i := idx[k]
		dec, wake, err := d.caps.admitResult(f, preps[k], copies[i].Tenant)
		results[i].Decision, results[i].Err = dec, err
		results[i].Wake = append(results[i].Wake, wake...)
	}
	d.giveBackFleet(ctx, results, fleet)
	return results
}

// fleetRound takes a lease of the fleet's cap for every copy, in one round
// trip: it records the leases taken in fleet and the decisions of the
// copies the fleet's cap held back in results, and returns the indices of
// the copies that go on to their tenants' caps and rates.
func (d *Decider) fleetRound(ctx context.Context, copies []Copy, results []Result, fleet []*Lease) []int {
	pending := make([]int, 0, len(copies))
	var calls []fcall
	var idx []int
	var preps []prepared
	for i, cp := range copies {
		p, err := d.caps.prepareFleet(cp)
		if err != nil {
			results[i].Err = err
			continue
		}
		calls, idx, preps = append(calls, d.caps.admitCall(p, cp.Tenant)), append(idx, i), append(preps, p)
	}
	d.l.lib.run(ctx, calls)
	for k, f := range calls {
		i := idx[k]
		dec, wake, err := d.caps.admitResult(f, preps[k], copies[i].Tenant)
		results[i].Wake = append(results[i].Wake, wake...)
		switch {
		case err != nil:
			results[i].Err = err
		case dec.Outcome != Admitted:
			results[i].Decision = dec
		default:
			fleet[i] = &dec.Lease
			pending = append(pending, i)
		}
	}
	return pending
}

// giveUpOwners gives up the owner record of each copy the fleet's cap
// held that names its incarnation, in one round trip, as admit does for a
// tenant's cap (the fleet's call cannot: the record lies in the tenant's
// slot). The copy did not run, and the copy its park makes must be free
// to: an incarnation redelivered after its worker died, say. A copy whose
// record could not be given up gets the error instead of Capped, so that
// it is not parked.
func (d *Decider) giveUpOwners(ctx context.Context, copies []Copy, results []Result) {
	var calls []fcall
	var idx []int
	for i, cp := range copies {
		if results[i].Err != nil || results[i].Outcome != Capped || cp.Fresh {
			continue
		}
		key, err := ownerKey(d.l.keys, cp.Tenant, cp.JobID, cp.Incarnation)
		if err != nil {
			results[i].Err = err
			continue
		}
		calls = append(calls, fcall{fn: d.l.lib.release, keys: []string{key}, args: []any{strconv.FormatInt(cp.Incarnation, 10)}})
		idx = append(idx, i)
	}
	if len(calls) == 0 {
		return
	}
	d.l.lib.run(ctx, calls)
	for k, f := range calls {
		v, err := replyInts(f.cmd, f.fn, 4)
		if err == nil {
			err = replyStatus(f.fn, f.keys[0], v)
		}
		if err != nil {
			results[idx[k]].Decision, results[idx[k]].Err = Decision{}, err
		}
	}
}

// giveBackFleet hands each admitted copy its lease of the fleet's cap
// (Decision.FleetLease) and gives back, in one round trip, those of the
// copies not admitted.
func (d *Decider) giveBackFleet(ctx context.Context, results []Result, fleet []*Lease) {
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
		wake, _ := d.caps.Finish(ctx, back)
		results[backOf[0]].Wake = append(results[backOf[0]].Wake, wake...)
	}
}

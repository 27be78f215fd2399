package throttle

import "context"

// decideCapped is DecideBatch when running caps apply: the fleet's cap
// first (a round trip), then the tenants' caps and rates (one more: the
// capped copies' admit calls ride in the pipeline of the others' decide
// calls), then the fleet's leases of copies not admitted go back (one
// more, only when there are any).
func (d *Decider) decideCapped(ctx context.Context, copies []Copy) []Result {
	results := make([]Result, len(copies))
	fleet := make([]*Lease, len(copies))
	pending := d.caps.admitFleet(ctx, copies, results, fleet)

	var plain []int // decided by decide
	var calls []fcall
	var idx []int
	var preps []prepared
	var owned []int // unlimited copies (credits alone): owner calls after calls
	var owners []fcall
	for _, i := range pending {
		p, capped, err := d.caps.prepareTenant(copies[i], d.prepare)
		switch {
		case !capped && unlimitedCopy(d.l.policies, copies[i]):
			f, ok, err := ownerCall(d.l, copies[i])
			if err != nil {
				results[i].Err = err
			} else if !ok {
				results[i].Decision = Decision{Outcome: Admitted, Shadow: d.l.policies.Policy(copies[i].Tenant).Shadow}
			} else {
				owned, owners = append(owned, i), append(owners, f)
			}
			continue
		case !capped:
			plain = append(plain, i)
			continue
		case err != nil:
			results[i].Err = err
			continue
		}
		calls, idx, preps = append(calls, d.caps.admitCall(p, copies[i].Tenant)), append(idx, i), append(preps, p)
	}
	calls = append(calls, owners...)
	decided := d.l.decideBatchWith(ctx, len(plain), func(k int) (prepared, error) { return d.prepare(copies[plain[k]]) }, calls)
	for k, i := range owned {
		results[i].Decision, results[i].Err = ownerResult(d.l, calls[len(idx)+k], copies[i])
	}
	calls = calls[:len(idx)]
	for k, i := range plain {
		results[i].Decision, results[i].Err = decided[k].Decision, decided[k].Err
	}
	for k, f := range calls {
		i := idx[k]
		dec, wake, err := d.caps.admitResult(f, preps[k], copies[i].Tenant)
		results[i].Decision, results[i].Err = dec, err
		results[i].Wake = append(results[i].Wake, wake...)
	}
	d.caps.giveBackFleet(ctx, results, fleet)
	return results
}

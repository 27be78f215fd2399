package credits

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/release"
	"github.com/throttler/throttler/subject"
	"github.com/throttler/throttler/throttle"
)

// Balances changes and reads tenants' balances in Redis; *throttle.Limiter
// satisfies it.
type Balances interface {
	AddCredits(ctx context.Context, tenant string, n int64) (throttle.CreditChange, error)
	SetCredits(ctx context.Context, tenant string, n int64) (throttle.CreditChange, error)
	Credits(ctx context.Context, tenant string) (throttle.CreditBalance, error)
	OpenCredits(ctx context.Context, tenant string, within time.Duration, head int64) error
}

// Options are where the operations act: the balances, the record stream,
// and the jobs stream whose parked copies a change brings back.
type Options struct {
	// Balances holds the balances. Required.
	Balances Balances
	// JetStream reaches the record stream and the jobs stream. Required.
	JetStream jetstream.JetStream
	// Records names the record stream (THROTTLER_CREDITS_STREAM).
	Records string
	// Replicas is the record stream's when it must be created.
	Replicas int
	// Stream and Schedules name the jobs stream and its copies' subjects,
	// as the workers' (THROTTLER_STREAM).
	Stream    string
	Schedules subject.Schedules
	// CostHeader names the header of a job's cost (THROTTLER_COST_HEADER),
	// to bring back the jobs a balance covers.
	CostHeader string
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// cost is the cost of a parked job, read from its headers as the workers
// read it: 0 for a cost they refuse (they dead-letter the job, drawing
// nothing).
func (o Options) cost(h nats.Header) int64 {
	c, err := header.ParseCost(h, o.CostHeader)
	if err != nil {
		return 0
	}
	return c
}

// Change is the outcome of Add or Set.
type Change struct {
	Record
	// Released is how many parked jobs the change brought back, in order.
	Released int `json:"released"`
}

// settle is how long after a change's release the new jobs it holds back
// wait (throttle.Limiter.OpenCredits): time for the workers to pull the
// jobs it brought back, which they take past the jobs consumer's backlog.
const settle = time.Second

// Add adds n (≥ 1) to tenant's balance; see change.
func Add(ctx context.Context, o Options, tenant string, n int64) (Change, error) {
	return change(ctx, o, tenant, "add", n, o.Balances.AddCredits)
}

// Set sets tenant's balance to n (≥ 0); see change.
func Set(ctx context.Context, o Options, tenant string, n int64) (Change, error) {
	return change(ctx, o, tenant, "set", n, o.Balances.SetCredits)
}

// change makes one operator change of a balance:
//  1. it opens the record stream, so that a JetStream that cannot record
//     fails the change before Redis is touched;
//  2. it changes the balance in Redis, which holds the tenant's new jobs
//     back (throttle.CreditsGate) so that those that waited go first;
//  3. it records the change, retrying while JetStream fails (a change made
//     but not recorded is an error that says so);
//  4. it brings back, in order, the tenant's parked jobs the new balance
//     covers (release.Covered), and makes the first it does not cover the
//     head of those that wait;
//  5. it lets new jobs through a second later.
func change(ctx context.Context, o Options, tenant, op string, n int64,
	apply func(context.Context, string, int64) (throttle.CreditChange, error)) (Change, error) {
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	st, err := OpenRecords(ctx, o.JetStream, o.Records, o.Replicas)
	if err != nil {
		return Change{}, err
	}
	last, err := lastRecord(ctx, st, o.Records, tenant)
	if err != nil {
		return Change{}, err
	}
	ch, err := apply(ctx, tenant, n)
	if err != nil {
		return Change{}, fmt.Errorf("changing %s's credits: %w", tenant, err)
	}
	// A balance Redis lost (a change recorded, none an operator wrote
	// held) was not 0: what was left cannot be known, and is not trusted.
	lost := last != nil && !ch.Before.Funded
	r := Record{Tenant: tenant, Op: op, Amount: n, Before: ch.Before.Balance, BeforeTrusted: ch.Before.Trusted && !lost,
		BeforeLost: lost, Balance: ch.After.Balance, At: now().UTC()}
	id, err := opID()
	if err != nil {
		return Change{Record: r}, err
	}
	record := func() error { return appendRecord(ctx, o.JetStream, o.Records, id, r) }
	bo := backoff.WithContext(backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond)), ctx)
	if err := backoff.Retry(record, bo); err != nil {
		return Change{Record: r}, fmt.Errorf("%s's balance is %d in Redis, but the change could not be recorded: %w", tenant, r.Balance, err)
	}
	// Only the jobs the balance covers come back, in order: brought back
	// all at once, the workers would draw on the balance in the order
	// they decide them, batch by batch, not in the jobs' order. The first
	// one it does not cover heads those that still wait.
	var budget int64
	if ch.After.Trusted {
		budget = ch.After.Balance
	}
	released, head, err := release.Covered(ctx, o.JetStream, o.Stream, o.Schedules, tenant, header.WaitCredits, now(), budget, o.cost)
	out := Change{Record: r, Released: released}
	if err != nil {
		return out, fmt.Errorf("%s's balance is %d; bringing back its waiting jobs failed (they come back by themselves within THROTTLER_MAX_DEFER): %w", tenant, r.Balance, err)
	}
	// Nothing brought back, nothing to go first: new jobs pass at once,
	// in their order, rather than wait a second and race the later ones.
	gate := settle
	if released == 0 {
		gate = 0
	}
	if err := o.Balances.OpenCredits(ctx, tenant, gate, int64(head)); err != nil {
		return out, fmt.Errorf("%s's balance is %d and %d waiting jobs are back; new jobs wait until %s: %w",
			tenant, r.Balance, released, now().Add(throttle.CreditsGate).UTC().Format(time.RFC3339), err)
	}
	return out, nil
}

// Status is a tenant's balance as Get reads it.
type Status struct {
	throttle.CreditBalance
	// Last is the last recorded change, nil when there is none.
	Last *Record `json:"last,omitempty"`
	// Lost says Redis holds no balance an operator wrote (Funded) although
	// a change was recorded:
	// it restarted empty, or failed over to a replica without it. The
	// tenant's jobs wait (a balance of 0) until an operator sets it.
	Lost bool `json:"lost,omitempty"`
}

// Get reads tenant's balance and its last recorded change.
func Get(ctx context.Context, o Options, tenant string) (Status, error) {
	b, err := o.Balances.Credits(ctx, tenant)
	if err != nil {
		return Status{}, fmt.Errorf("reading %s's credits: %w", tenant, err)
	}
	h, err := History(ctx, o.JetStream, o.Records, tenant)
	if err != nil {
		return Status{}, err
	}
	s := Status{CreditBalance: b}
	if len(h) > 0 {
		s.Last = &h[len(h)-1]
		s.Lost = !b.Funded
		// What was left cannot be known: the 0 Redis reads is not trusted.
		s.Trusted = s.Trusted && !s.Lost
	}
	return s, nil
}

// opID names one change, for the record stream's deduplication.
func opID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("naming the change: %w", err)
	}
	return "credits:" + hex.EncodeToString(b[:]), nil
}

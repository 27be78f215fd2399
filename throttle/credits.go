package throttle

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// MaxCredits is the largest balance of credits a tenant may hold, and the
// most one AddCredits or SetCredits takes: 2^53 - 1, the largest whole
// number Redis' Lua holds exactly.
const MaxCredits = 1<<53 - 1

// CreditsGate is how long a top-up (AddCredits, SetCredits) holds back
// every job of the tenant but the released ones (Copy.Released), so that
// the jobs waiting for credits are charged first, in order: the releaser
// ends it with OpenCredits once the release is published, and it ends by
// itself after CreditsGate should the releaser die.
const CreditsGate = 60 * time.Second

// CreditsGateRetry is the longest wait a job held back by a top-up's gate
// is given: a job that comes while the release runs tries again this soon,
// not when the gate would end by itself, since the releaser ends it a
// second after the release; told to wait out the whole gate, it would see
// every later job take the credits it was due.
const CreditsGateRetry = time.Second

// CreditBalance is a tenant's balance of credits at one moment.
type CreditBalance struct {
	// Tenant owns the balance.
	Tenant string `json:"tenant"`
	// Balance is the credits left; 0 when there is no balance.
	Balance int64 `json:"balance"`
	// Exists says Redis holds a balance for the tenant. One that does not
	// is a trusted balance of 0 (Redis lost everything: the tenant's jobs
	// wait for a top-up).
	Exists bool `json:"exists"`
	// Trusted says the balance was written since Redis last restarted or
	// failed over (which may have lost writes): no job is admitted against
	// an untrusted balance until an operator adds or sets credits.
	Trusted bool `json:"trusted"`
	// Funded says an operator set or added to the balance Redis holds
	// (AddCredits, SetCredits). A balance without it was made by a job's
	// refusal: a tenant never funded, or one whose balance Redis lost.
	Funded bool `json:"funded"`
	// WaitingFrom is the order (Copy.Order) of the first job waiting for
	// credits, behind which later jobs wait; 0 when none waits.
	WaitingFrom int64 `json:"waiting_from,omitempty"`
	// GateUntil is when the gate a top-up set ends (see CreditsGate); the
	// zero time when there is none, or it ended.
	GateUntil time.Time `json:"gate_until,omitzero"`
}

// CreditChange is a balance of credits before and after an operation.
type CreditChange struct {
	// Before is the balance the operation found.
	Before CreditBalance `json:"before"`
	// After is the balance it left.
	After CreditBalance `json:"after"`
}

// Operations of the balance function (lua/credits.lua, balance).
const (
	balanceGet  = "1"
	balanceAdd  = "2"
	balanceSet  = "3"
	balanceOpen = "4"
)

// AddCredits adds n credits, from 1 to MaxCredits, to tenant's balance:
// a trusted balance becomes its credits plus n (refused, ErrInvalid, past
// MaxCredits, nothing written), an untrusted one n (its remainder is
// forfeited: it cannot be known). The balance is then trusted, the jobs
// waiting for credits are no longer waited behind (they are released in
// order), and the gate holds every other job back for CreditsGate, until
// OpenCredits.
func (l *Limiter) AddCredits(ctx context.Context, tenant string, n int64) (CreditChange, error) {
	if n < 1 || n > MaxCredits {
		return CreditChange{}, &InvalidError{Code: CodeAmount, Detail: fmt.Sprintf("credits %d to add out of range [1, %d]", n, MaxCredits)}
	}
	return l.balanceOp(ctx, tenant, balanceAdd, strconv.FormatInt(n, 10), strconv.FormatInt(CreditsGate.Microseconds(), 10))
}

// SetCredits makes tenant's balance n credits, from 0 to MaxCredits,
// whatever it held, as AddCredits does otherwise: trusted, nobody waited
// behind, the gate set for CreditsGate.
func (l *Limiter) SetCredits(ctx context.Context, tenant string, n int64) (CreditChange, error) {
	if n < 0 || n > MaxCredits {
		return CreditChange{}, &InvalidError{Code: CodeAmount, Detail: fmt.Sprintf("credits %d to set out of range [0, %d]", n, MaxCredits)}
	}
	return l.balanceOp(ctx, tenant, balanceSet, strconv.FormatInt(n, 10), strconv.FormatInt(CreditsGate.Microseconds(), 10))
}

// Credits reads tenant's balance of credits, writing nothing.
func (l *Limiter) Credits(ctx context.Context, tenant string) (CreditBalance, error) {
	c, err := l.balanceOp(ctx, tenant, balanceGet)
	return c.Before, err
}

// OpenCredits moves the end of the gate of tenant's balance to within
// from now (0: now, the gate ends), for the releaser to call once the
// release of the waiting jobs is published, and makes head (a job's
// Order, above 0) the first job waiting for credits unless one before it
// is: the releaser brought back only the jobs before head, which the
// balance covers. 0 leaves the first waiting as it is. A tenant without a
// balance has no gate: nothing is written.
func (l *Limiter) OpenCredits(ctx context.Context, tenant string, within time.Duration, head int64) error {
	if within < 0 || within > MaxHorizon {
		return &InvalidError{Code: CodeHorizon, Detail: fmt.Sprintf("gate %s out of range [0, %s]", within, MaxHorizon)}
	}
	if head < 0 || head > MaxCredits {
		return &InvalidError{Code: CodeOrder, Detail: fmt.Sprintf("order %d out of range [0, %d]", head, int64(MaxCredits))}
	}
	_, err := l.balanceOp(ctx, tenant, balanceOpen, strconv.FormatInt(within.Microseconds(), 10), strconv.FormatInt(head, 10))
	return err
}

// balanceOp runs the balance function's operation op on tenant's balance.
func (l *Limiter) balanceOp(ctx context.Context, tenant, op string, args ...any) (CreditChange, error) {
	tag, err := l.keys.tag(tenant)
	if err != nil {
		return CreditChange{}, err
	}
	key := l.keys.credits(tag)
	c := []fcall{{fn: l.lib.balance, keys: []string{key}, args: append([]any{op, "0"}, args...)}}
	l.lib.run(ctx, c)
	v, err := c[0].cmd.Result()
	if err != nil {
		_, err = replyInts(c[0].cmd, c[0].fn, 10)
		return CreditChange{}, err
	}
	arr, _ := v.([]any)
	if len(arr) == 4 {
		t, err := replyInts(c[0].cmd, c[0].fn, 4)
		if err != nil {
			return CreditChange{}, err
		}
		return CreditChange{}, replyStatus(c[0].fn, key, t)
	}
	t, err := replyInts(c[0].cmd, c[0].fn, 10)
	if err != nil {
		return CreditChange{}, err
	}
	if t[0] != statusAdmitted {
		return CreditChange{}, &RedisError{Op: "FCALL " + c[0].fn, Err: fmt.Errorf("unexpected reply %v", t)}
	}
	now := t[1]
	return CreditChange{Before: creditBalance(tenant, now, t[2:6]), After: creditBalance(tenant, now, t[6:10])}, nil
}

// creditBalance reads a balance from the balance function's reply at
// now: b, flags (bit 0 exists, bit 1 trusted, bit 2 funded), q, g.
func creditBalance(tenant string, now int64, t []int64) CreditBalance {
	b := CreditBalance{Tenant: tenant, Balance: t[0], Exists: t[1]&1 == 1, Trusted: t[1]&2 == 2, Funded: t[1]&4 == 4, WaitingFrom: t[2]}
	if t[3] > now {
		b.GateUntil = time.UnixMicro(t[3])
	}
	return b
}

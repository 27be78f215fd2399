package throttle_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// creditEnv is an engine over one policy for every tenant, with a
// horizon of an hour.
type creditEnv struct {
	env
	l *throttle.Limiter
	e *engine
}

// newCreditEnv returns the engine of spec (ParsePolicy) for every tenant.
func newCreditEnv(t *testing.T, spec string) *creditEnv {
	t.Helper()
	ce := &creditEnv{env: setup(t)}
	pol, err := throttle.ParsePolicy(spec, 0)
	if err != nil {
		t.Fatalf("ParsePolicy(%q): %v", spec, err)
	}
	if ce.l, err = throttle.New(ce.rdb, throttle.Options{Policies: throttle.Rules{Default: pol}, Horizon: time.Hour, Prefix: ce.prefix}); err != nil {
		t.Fatal(err)
	}
	ce.e = newEngine(t, ce.l)
	return ce
}

// cp is a copy of tenant's job id of the given cost and order, at t0 plus
// at, its own incarnation.
func cp(tenant, id string, cost, order int64, at time.Duration) throttle.Copy {
	return throttle.Copy{Request: throttle.Request{Tenant: tenant, JobID: id, Cost: cost, At: t0.Add(at)}, Incarnation: order + 1000, Order: order}
}

// decideOK decides copies and fails t on any error.
func (ce *creditEnv) decideOK(t *testing.T, copies ...throttle.Copy) []throttle.Decision {
	t.Helper()
	var out []throttle.Decision
	for i, r := range ce.e.DecideBatch(context.Background(), copies) {
		if r.Err != nil {
			t.Fatalf("copy %d (%s/%s): %v", i, copies[i].Tenant, copies[i].JobID, r.Err)
		}
		out = append(out, r.Decision)
	}
	return out
}

// balance reads tenant's balance and fails t on an error.
func (ce *creditEnv) balance(t *testing.T, tenant string) throttle.CreditBalance {
	t.Helper()
	b, err := ce.l.Credits(context.Background(), tenant)
	if err != nil {
		t.Fatalf("Credits(%s): %v", tenant, err)
	}
	return b
}

// add adds n credits to tenant, opens the gate, and fails t on an error.
func (ce *creditEnv) add(t *testing.T, tenant string, n int64) throttle.CreditChange {
	t.Helper()
	c, err := ce.l.AddCredits(context.Background(), tenant, n)
	if err != nil {
		t.Fatalf("AddCredits(%s, %d): %v", tenant, n, err)
	}
	if err := ce.l.OpenCredits(context.Background(), tenant, 0, 0); err != nil {
		t.Fatalf("OpenCredits(%s): %v", tenant, err)
	}
	return c
}

func TestParsePolicyCredits(t *testing.T) {
	for spec, want := range map[string]string{
		"10/s+credits":                     "10/s:10+credits",
		"credits":                          "credits",
		"credits:dlq":                      "credits:dlq",
		"100/m+credits:dlq+running:3":      "100/m:100+credits:dlq+running:3",
		"shadow+credits+5/s":               "5/s:5+credits+shadow",
		" credits + running:2 ":            "credits+running:2",
		"sliding:5/10s+credits+window:3/d": "sliding:5/10s+window:3/d+credits",
	} {
		p, err := throttle.ParsePolicy(spec, 0)
		if err != nil {
			t.Fatalf("ParsePolicy(%q): %v", spec, err)
		}
		if got := p.String(); got != want {
			t.Fatalf("ParsePolicy(%q).String() = %q, want %q", spec, got, want)
		}
		again, err := throttle.ParsePolicy(p.String(), 0)
		if err != nil || again.String() != want || again.Credits != p.Credits {
			t.Fatalf("ParsePolicy(%q) again: %v, %v", want, again, err)
		}
	}
	if p, _ := throttle.ParsePolicy("credits:dlq", 0); p.Credits != throttle.CreditsDeadLetter || len(p.Limits) != 0 {
		t.Fatalf("credits:dlq parsed as %+v", p)
	}
	for _, spec := range []string{"credits+credits", "credits+credits:dlq", "credits:dlq+credits", "credits:wait", "credits:", "10/s+credit", "credits:DLQ"} {
		if _, err := throttle.ParsePolicy(spec, 0); err == nil {
			t.Fatalf("ParsePolicy(%q) accepted", spec)
		}
	}
	if err := (throttle.Policy{Credits: 3}).Validate(); err == nil {
		t.Fatal("an unknown credits mode validated")
	}
	if throttle.Unfunded.String() != "unfunded" {
		t.Fatalf("Unfunded.String() = %q", throttle.Unfunded.String())
	}
}

// TestCreditsChargedOnce decides one job again and again, as several
// incarnations: it is charged its cost once.
func TestCreditsChargedOnce(t *testing.T) {
	ce := newCreditEnv(t, "1000/s:1000+credits")
	ce.add(t, "a", 10)
	j := cp("a", "j1", 3, 1, 0)
	for k := range 4 {
		j.Incarnation = 1000 + int64(k%2) // the original, then a copy of it
		d := ce.decideOK(t, j)[0]
		if k%2 == 0 && d.Outcome != throttle.Admitted || k%2 == 1 && d.Outcome != throttle.Duplicate {
			t.Fatalf("decision %d: %+v", k, d)
		}
	}
	if b := ce.balance(t, "a"); b.Balance != 7 || !b.Trusted || !b.Exists {
		t.Fatalf("balance after one job of cost 3 decided 4 times: %+v, want 7", b)
	}
	// A Limiter request with a job id is charged once too; one without is
	// charged each time.
	for range 2 {
		if _, err := ce.l.Decide(context.Background(), throttle.Request{Tenant: "a", JobID: "r1", Cost: 2, At: t0}); err != nil {
			t.Fatal(err)
		}
	}
	if d, err := ce.l.Decide(context.Background(), throttle.Request{Tenant: "a", Cost: 1, At: t0}); err != nil || d.Outcome != throttle.Admitted {
		t.Fatalf("Decide without id: %+v, %v", d, err)
	}
	if b := ce.balance(t, "a"); b.Balance != 4 {
		t.Fatalf("balance %d, want 4", b.Balance)
	}
}

// TestCreditsRefund: a job charged and then Limited or Capped gets its
// credits back.
func TestCreditsRefund(t *testing.T) {
	t.Run("limited", func(t *testing.T) {
		ce := newCreditEnv(t, "1/h:1+credits")
		ce.add(t, "a", 10)
		ctx := context.Background()
		// Horizon 1h: the second job's slot lies at 1h, within; the third's
		// past it: Limited.
		for i, want := range []throttle.Outcome{throttle.Admitted, throttle.Reserved, throttle.Limited} {
			d, err := ce.l.Decide(ctx, throttle.Request{Tenant: "a", JobID: "j" + string(rune('1'+i)), Cost: 1, At: t0})
			if err != nil || d.Outcome != want {
				t.Fatalf("job %d: %+v, %v; want %s", i, d, err, want)
			}
		}
		if b := ce.balance(t, "a"); b.Balance != 8 {
			t.Fatalf("balance %d, want 8: the Limited job refunded", b.Balance)
		}
		// No id: charged, Limited, refunded.
		if d, _ := ce.l.Decide(ctx, throttle.Request{Tenant: "a", Cost: 1, At: t0}); d.Outcome != throttle.Limited {
			t.Fatalf("no id: %+v", d)
		}
		if b := ce.balance(t, "a"); b.Balance != 8 {
			t.Fatalf("balance %d, want 8 after a Limited job without id", b.Balance)
		}
		// The Limited job, back, is charged again (it was refunded).
		if d, _ := ce.l.Decide(ctx, throttle.Request{Tenant: "a", JobID: "j3", Cost: 1, At: t0.Add(time.Hour)}); d.Outcome != throttle.Reserved {
			t.Fatalf("j3 back: %+v", d)
		}
		if b := ce.balance(t, "a"); b.Balance != 7 {
			t.Fatalf("balance %d, want 7", b.Balance)
		}
	})
	t.Run("capped", func(t *testing.T) {
		ce := newCreditEnv(t, "credits+running:1")
		ce.add(t, "a", 10)
		d := ce.decideOK(t, cp("a", "j1", 4, 1, 0), cp("a", "j2", 4, 2, 0))
		if d[0].Outcome != throttle.Admitted || d[1].Outcome != throttle.Capped {
			t.Fatalf("decisions %+v", d)
		}
		if b := ce.balance(t, "a"); b.Balance != 6 {
			t.Fatalf("balance %d, want 6: the Capped job refunded", b.Balance)
		}
	})
}

// TestCreditsOrder: a job the balance cannot cover holds later ones back,
// a top-up clears that, and its gate lets released copies pass first.
func TestCreditsOrder(t *testing.T) {
	// Credits alone: the gate is set at Redis' clock, and buckets would
	// not take jobs at both Redis' clock and t0.
	ce := newCreditEnv(t, "credits")
	ctx := context.Background()
	if _, err := ce.l.SetCredits(ctx, "a", 3); err != nil {
		t.Fatal(err)
	}
	if err := ce.l.OpenCredits(ctx, "a", 0, 0); err != nil {
		t.Fatal(err)
	}
	d := ce.decideOK(t, cp("a", "j10", 5, 10, 0), cp("a", "j11", 1, 11, 0))
	want := throttle.Decision{Outcome: throttle.Unfunded, Balance: 3}
	if d[0] != want || d[1] != want {
		t.Fatalf("decisions %+v, want both %+v", d, want)
	}
	if b := ce.balance(t, "a"); b.Balance != 3 || b.WaitingFrom != 10 {
		t.Fatalf("balance %+v, want 3 waiting from 10", b)
	}
	// A job ahead of the one waiting may still be charged.
	if d := ce.decideOK(t, cp("a", "j9", 1, 9, 0)); d[0].Outcome != throttle.Admitted {
		t.Fatalf("j9: %+v", d[0])
	}
	c, err := ce.l.AddCredits(ctx, "a", 5)
	if err != nil || c.Before.Balance != 2 || c.After.Balance != 7 || c.After.WaitingFrom != 0 || c.Before.WaitingFrom != 10 {
		t.Fatalf("AddCredits: %+v, %v", c, err)
	}
	if c.After.GateUntil.IsZero() {
		t.Fatalf("AddCredits set no gate: %+v", c.After)
	}
	// The gate holds back a copy that was not released, with a wait.
	g := ce.decideOK(t, throttle.Copy{Request: throttle.Request{Tenant: "a", JobID: "j12", Cost: 1}, Incarnation: 12, Order: 12})[0]
	if g.Outcome != throttle.Unfunded || g.Wait <= 0 || g.Wait > throttle.CreditsGateRetry {
		t.Fatalf("an unreleased copy at the gate: %+v", g)
	}
	rel := func(c throttle.Copy) throttle.Copy { c.Released, c.At = true, time.Time{}; return c }
	d = ce.decideOK(t, rel(cp("a", "j10", 5, 10, 0)), rel(cp("a", "j11", 1, 11, 0)))
	if d[0].Outcome != throttle.Admitted || d[1].Outcome != throttle.Admitted {
		t.Fatalf("released copies: %+v", d)
	}
	if err := ce.l.OpenCredits(ctx, "a", 0, 0); err != nil {
		t.Fatal(err)
	}
	if b := ce.balance(t, "a"); b.Balance != 1 || !b.GateUntil.IsZero() || b.WaitingFrom != 0 {
		t.Fatalf("balance after the release: %+v, want 1, no gate", b)
	}
	if d := ce.decideOK(t, cp("a", "j12", 1, 12, 0)); d[0].Outcome != throttle.Admitted {
		t.Fatalf("j12 after the gate opened: %+v", d[0])
	}

	// A top-up that brought back only the jobs before 20 makes 20 the
	// first waiting: a later job waits behind it, an earlier one is not
	// held; a head above a lower first waiting leaves that one.
	ce.add(t, "a", 3)
	if err := ce.l.OpenCredits(ctx, "a", 0, 20); err != nil {
		t.Fatal(err)
	}
	if b := ce.balance(t, "a"); b.WaitingFrom != 20 {
		t.Fatalf("first waiting after open with head 20: %+v", b)
	}
	if d := ce.decideOK(t, cp("a", "j21", 1, 21, 0)); d[0].Outcome != throttle.Unfunded || d[0].Wait != 0 {
		t.Fatalf("j21 behind the head 20: %+v", d[0])
	}
	if d := ce.decideOK(t, cp("a", "j19", 1, 19, 0)); d[0].Outcome != throttle.Admitted {
		t.Fatalf("j19 before the head 20: %+v", d[0])
	}
	if err := ce.l.OpenCredits(ctx, "a", 0, 30); err != nil {
		t.Fatal(err)
	}
	if b := ce.balance(t, "a"); b.WaitingFrom != 20 {
		t.Fatalf("first waiting after open with head 30 behind 20: %+v", b)
	}
}

// TestCreditsDeadLetter: credits:dlq refuses a job it cannot cover with
// CreditsDeadLetter, and no later job waits behind it.
func TestCreditsDeadLetter(t *testing.T) {
	ce := newCreditEnv(t, "credits:dlq")
	ce.add(t, "a", 3)
	d := ce.decideOK(t, cp("a", "j1", 5, 1, 0), cp("a", "j2", 2, 2, 0))
	if d[0] != (throttle.Decision{Outcome: throttle.Unfunded, Balance: 3, CreditsDeadLetter: true}) || d[1].Outcome != throttle.Admitted {
		t.Fatalf("decisions %+v", d)
	}
	if b := ce.balance(t, "a"); b.Balance != 1 || b.WaitingFrom != 0 {
		t.Fatalf("balance %+v, want 1, nobody waiting", b)
	}
}

// TestCreditsShadow: in shadow mode nothing is refused or charged, and the
// decision says what enforcing would have done.
func TestCreditsShadow(t *testing.T) {
	ce := newCreditEnv(t, "1000/s:1000+credits+shadow")
	ce.add(t, "a", 3)
	d := ce.decideOK(t, cp("a", "j1", 2, 1, 0), cp("a", "j2", 5, 2, 0), cp("a", "j3", 3, 3, 0))
	for i, want := range []bool{false, true, false} {
		if d[i].Outcome != throttle.Admitted || !d[i].Shadow || d[i].ShadowUnfunded != want {
			t.Fatalf("job %d: %+v, want admitted in shadow, ShadowUnfunded %v", i, d[i], want)
		}
	}
	if b := ce.balance(t, "a"); b.Balance != 3 || b.WaitingFrom != 0 {
		t.Fatalf("balance %+v, want 3 untouched", b)
	}
	if n := len(keys(t, ce.rdb, ce.prefix+":{a}:cp:")); n != 0 {
		t.Fatalf("%d paid markers written in shadow mode", n)
	}
}

// TestCreditsOperations checks AddCredits, SetCredits and their bounds.
func TestCreditsOperations(t *testing.T) {
	ce := newCreditEnv(t, "credits")
	ctx := context.Background()
	if b := ce.balance(t, "a"); b != (throttle.CreditBalance{Tenant: "a", Trusted: true}) {
		t.Fatalf("no balance: %+v", b)
	}
	for _, n := range []int64{0, -1, throttle.MaxCredits + 1} {
		if _, err := ce.l.AddCredits(ctx, "a", n); !errors.Is(err, throttle.ErrInvalid) {
			t.Fatalf("AddCredits(%d): %v, want ErrInvalid", n, err)
		}
	}
	for _, n := range []int64{-1, throttle.MaxCredits + 1} {
		if _, err := ce.l.SetCredits(ctx, "a", n); !errors.Is(err, throttle.ErrInvalid) {
			t.Fatalf("SetCredits(%d): %v, want ErrInvalid", n, err)
		}
	}
	if err := ce.l.OpenCredits(ctx, "a", -time.Second, 0); !errors.Is(err, throttle.ErrInvalid) {
		t.Fatalf("OpenCredits(-1s): %v", err)
	}
	if _, err := ce.l.AddCredits(ctx, "", 1); !errors.Is(err, throttle.ErrInvalid) {
		t.Fatalf("AddCredits of no tenant: %v", err)
	}
	if n := len(keys(t, ce.rdb, ce.prefix)); n != 0 {
		t.Fatalf("%d keys written by refused operations", n)
	}
	if c, err := ce.l.SetCredits(ctx, "a", throttle.MaxCredits-1); err != nil || c.After.Balance != throttle.MaxCredits-1 {
		t.Fatalf("SetCredits(max-1): %+v, %v", c, err)
	}
	if _, err := ce.l.AddCredits(ctx, "a", 2); !errors.Is(err, throttle.ErrInvalid) {
		t.Fatalf("AddCredits past MaxCredits: %v", err)
	}
	if c, err := ce.l.AddCredits(ctx, "a", 1); err != nil || c.After.Balance != throttle.MaxCredits {
		t.Fatalf("AddCredits to MaxCredits: %+v, %v", c, err)
	}
	if c, err := ce.l.SetCredits(ctx, "a", 0); err != nil || c.After.Balance != 0 || !c.After.Exists || !c.After.Trusted || c.Before.Balance != throttle.MaxCredits {
		t.Fatalf("SetCredits(0): %+v, %v", c, err)
	}
	bk, _ := throttle.CreditsKeys(ce.prefix, "a", "")
	if ttl, err := ce.rdb.PTTL(ctx, bk).Result(); err != nil || ttl != -1 {
		t.Fatalf("the balance's TTL: %v, %v; want none", ttl, err)
	}
	// Another type, and a malformed balance.
	ce.rdb.Set(ctx, bk, "x", 0)
	if _, err := ce.l.Credits(ctx, "a"); !errors.Is(err, throttle.ErrRedis) {
		t.Fatalf("Credits of a string: %v, want ErrRedis", err)
	}
	r := ce.e.DecideBatch(ctx, []throttle.Copy{cp("a", "j1", 1, 1, 0)})
	if !errors.Is(r[0].Err, throttle.ErrRedis) {
		t.Fatalf("a job against a string: %+v", r[0])
	}
	ce.rdb.Del(ctx, bk)
	ce.rdb.HSet(ctx, bk, "b", "1.5")
	var ie *throttle.InvalidError
	if _, err := ce.l.Credits(ctx, "a"); !errors.As(err, &ie) || ie.Code != throttle.CodeCredits {
		t.Fatalf("Credits of a malformed balance: %v", err)
	}
	r = ce.e.DecideBatch(ctx, []throttle.Copy{cp("a", "j1", 1, 1, 0)})
	if !errors.As(r[0].Err, &ie) || ie.Code != throttle.CodeCredits {
		t.Fatalf("a job against a malformed balance: %+v", r[0])
	}
	if c, err := ce.l.SetCredits(ctx, "a", 4); err != nil || c.After.Balance != 4 || c.Before.Trusted {
		t.Fatalf("SetCredits over a malformed balance: %+v, %v", c, err)
	}
	snap, err := ce.l.Peek(ctx, "a", time.Time{})
	if err != nil || snap.Credits == nil || snap.Credits.Balance != 4 {
		t.Fatalf("Peek: %+v, %v", snap.Credits, err)
	}
}

package throttle_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// capEnv is an engine with running caps at a clock the test moves.
type capEnv struct {
	env
	l   *throttle.Limiter
	c   *engine
	now time.Time
}

// newCapEnv returns an engine over rules with caps o, its lease calls at
// the env's clock (starting at t0).
func newCapEnv(t *testing.T, rules throttle.Rules, o throttle.CapOptions) *capEnv {
	t.Helper()
	ce := &capEnv{env: setup(t), now: t0}
	l, err := throttle.New(ce.rdb, throttle.Options{Policies: rules, Horizon: time.Hour, Prefix: ce.prefix})
	if err != nil {
		t.Fatal(err)
	}
	ce.l = l
	c, err := makeEngine(l, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	o.At = func() time.Time { return ce.now }
	if ce.c, err = c.withCaps(l, o); err != nil {
		t.Fatal(err)
	}
	return ce
}

// job decides the job id of tenant at the env's clock, an incarnation of
// its own.
func (ce *capEnv) job(t *testing.T, tenant, id string) throttle.Result {
	t.Helper()
	inc, _ := strconv.ParseInt(id[1:], 10, 64)
	r := ce.c.DecideBatch(context.Background(), []throttle.Copy{{
		Request: throttle.Request{Tenant: tenant, JobID: id, At: ce.now}, Incarnation: 100 + inc}})
	if r[0].Err != nil {
		t.Fatalf("%s/%s: %v", tenant, id, r[0].Err)
	}
	return r[0]
}

// finish gives back r's leases and returns the ids woken.
func (ce *capEnv) finish(t *testing.T, r throttle.Result) []string {
	t.Helper()
	w, err := ce.c.Finish(context.Background(), r.Leases())
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	return ids(w)
}

func ids(ws []throttle.Waiter) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.JobID)
	}
	return out
}

func wantOutcome(t *testing.T, what string, r throttle.Result, o throttle.Outcome) {
	t.Helper()
	if r.Outcome != o {
		t.Fatalf("%s: %+v, want %s", what, r, o)
	}
}

// A cap of 2: two jobs run, the others wait in arrival order, a freed
// lease calls the head of the line and holds its place, and only the run
// that holds a lease can give it back.
func TestCapAdmitsInTurn(t *testing.T) {
	ce := newCapEnv(t, throttle.Rules{Default: throttle.Policy{Running: 2}}, throttle.CapOptions{})
	j1, j2 := ce.job(t, "acme", "j1"), ce.job(t, "acme", "j2")
	wantOutcome(t, "j1", j1, throttle.Admitted)
	wantOutcome(t, "j2", j2, throttle.Admitted)
	if j1.Lease.Token == "" || j1.Lease.Token == j2.Lease.Token || j1.Lease.Tenant != "acme" {
		t.Fatalf("leases %+v and %+v: want distinct tokens of acme", j1.Lease, j2.Lease)
	}
	j3 := ce.job(t, "acme", "j3")
	wantOutcome(t, "j3", j3, throttle.Capped)
	if j3.Ahead != 0 || j3.Running != 2 || j3.CappedBy != "running:2" {
		t.Fatalf("j3: %+v, want 0 ahead, 2 running, by running:2", j3.Decision)
	}
	if j4 := ce.job(t, "acme", "j4"); j4.Outcome != throttle.Capped || j4.Ahead != 1 {
		t.Fatalf("j4: %+v, want Capped with 1 ahead", j4.Decision)
	}
	// Another tenant has its own cap.
	wantOutcome(t, "globex", ce.job(t, "globex", "g1"), throttle.Admitted)

	// A wrong token frees nothing.
	if w, err := ce.c.Finish(context.Background(), []throttle.Lease{{Tenant: "acme", Token: "notmine"}}); err != nil || len(w) != 0 {
		t.Fatalf("Finish of a foreign token: woke %v, err %v; want nothing", w, err)
	}
	if j5 := ce.job(t, "acme", "j5"); j5.Outcome != throttle.Capped || j5.Ahead != 2 {
		t.Fatalf("j5: %+v, want Capped with 2 ahead", j5.Decision)
	}

	if woke := ce.finish(t, j1); !slices.Equal(woke, []string{"j3"}) {
		t.Fatalf("j1 done woke %v, want [j3]", woke)
	}
	snap, err := ce.l.Peek(context.Background(), "acme", ce.now)
	if err != nil || snap.Cap == nil || *snap.Cap != (throttle.CapSnapshot{Running: 1, Called: 1, Waiting: 2, Ahead: 2}) {
		t.Fatalf("Peek: %+v, %v; want 1 running, 1 called, 2 waiting, both ahead of a newcomer", snap.Cap, err)
	}
	// j1 again frees nothing: its lease is gone.
	if woke := ce.finish(t, j1); len(woke) != 0 {
		t.Fatalf("j1 done twice woke %v, want nothing", woke)
	}
	// The room is j3's: a newcomer waits behind j4 and j5.
	if j6 := ce.job(t, "acme", "j6"); j6.Outcome != throttle.Capped || j6.Ahead != 2 {
		t.Fatalf("j6 while j3 is called: %+v, want Capped behind j4 and j5", j6.Decision)
	}
	j3 = ce.job(t, "acme", "j3")
	wantOutcome(t, "j3 back", j3, throttle.Admitted)
	if woke := ce.finish(t, j2); !slices.Equal(woke, []string{"j4"}) {
		t.Fatalf("j2 done woke %v, want [j4]", woke)
	}
	if woke := ce.finish(t, j3); !slices.Equal(woke, []string{"j5"}) {
		t.Fatalf("j3 done woke %v, want [j5]", woke)
	}
}

// A lease whose worker died expires after the lease TTL; a renewed one
// does not; one renewed too late is lost. A poke hands expired room on.
func TestCapLeaseExpiresUnlessRenewed(t *testing.T) {
	ce := newCapEnv(t, throttle.Rules{Default: throttle.Policy{Running: 2}}, throttle.CapOptions{LeaseTTL: 10 * time.Second})
	ctx := context.Background()
	j1, j2 := ce.job(t, "acme", "j1"), ce.job(t, "acme", "j2")
	wantOutcome(t, "j3", ce.job(t, "acme", "j3"), throttle.Capped)

	ce.now = t0.Add(8 * time.Second)
	if lost, err := ce.c.Renew(ctx, j1.Leases()); err != nil || len(lost) != 0 {
		t.Fatalf("Renew j1 in time: lost %v, err %v", lost, err)
	}
	ce.now = t0.Add(12 * time.Second) // j2's lease expired, j1's renewed to 18 s
	if lost, err := ce.c.Renew(ctx, j2.Leases()); err != nil || len(lost) != 1 || lost[0] != j2.Lease {
		t.Fatalf("Renew j2 too late: lost %v, err %v; want j2's lease", lost, err)
	}
	w, err := ce.c.Poke(ctx, []string{"acme"})
	if err != nil || !slices.Equal(ids(w), []string{"j3"}) {
		t.Fatalf("Poke after j2's lease expired: woke %v, err %v; want [j3]", ids(w), err)
	}
	wantOutcome(t, "j3 back", ce.job(t, "acme", "j3"), throttle.Admitted)
	// j1 still holds its place: the cap is full.
	wantOutcome(t, "j4", ce.job(t, "acme", "j4"), throttle.Capped)
}

// A called job that does not come back within the call TTL goes back to
// the head of the line, to be called again by the next call with room (a
// poke here); a forfeited call hands its place to the next in line.
func TestCapCallExpires(t *testing.T) {
	ce := newCapEnv(t, throttle.Rules{Default: throttle.Policy{Running: 1}}, throttle.CapOptions{CallTTL: time.Second})
	ctx := context.Background()
	j1 := ce.job(t, "acme", "j1")
	for _, id := range []string{"j2", "j3", "j4"} {
		wantOutcome(t, id, ce.job(t, "acme", id), throttle.Capped)
	}
	if woke := ce.finish(t, j1); !slices.Equal(woke, []string{"j2"}) {
		t.Fatalf("woke %v, want [j2]", woke)
	}
	ce.now = t0.Add(2 * time.Second)
	w, err := ce.c.Poke(ctx, []string{"acme"})
	if err != nil || !slices.Equal(ids(w), []string{"j2"}) {
		t.Fatalf("Poke after j2's call expired: woke %v, err %v; want [j2] again", ids(w), err)
	}
	w, err = ce.c.Forfeit(ctx, throttle.Waiter{Tenant: "acme", JobID: "j2"}, false)
	if err != nil || !slices.Equal(ids(w), []string{"j3"}) {
		t.Fatalf("Forfeit j2: woke %v, err %v; want [j3]", ids(w), err)
	}
	// j2, back after all, waits again: behind j4 (j3 holds the place).
	if j2 := ce.job(t, "acme", "j2"); j2.Outcome != throttle.Capped || j2.Ahead != 1 {
		t.Fatalf("j2 back late: %+v, want Capped behind j4", j2.Decision)
	}
	// j3, back after its call expired, was put back first in line: it runs
	// as soon as there is room.
	ce.now = t0.Add(4 * time.Second)
	if _, err := ce.c.Poke(ctx, []string{"acme"}); err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, "j3 back late, first in line", ce.job(t, "acme", "j3"), throttle.Admitted)
}

// A tenant's waiting list keeps the jobs' order (Copy.Order, the stream
// sequence of their first delivery) whatever order workers decided them
// in.
func TestCapWaitingListKeepsOrder(t *testing.T) {
	ce := newCapEnv(t, throttle.Rules{Default: throttle.Policy{Running: 1}}, throttle.CapOptions{})
	ctx := context.Background()
	decide := func(id string, order int64) throttle.Result {
		r := ce.c.DecideBatch(ctx, []throttle.Copy{{Request: throttle.Request{Tenant: "acme", JobID: id, At: ce.now}, Incarnation: order, Order: order}})
		if r[0].Err != nil {
			t.Fatal(r[0].Err)
		}
		return r[0]
	}
	running := decide("j1", 1)
	for _, o := range []int64{5, 3, 4, 2} { // decided out of order
		wantOutcome(t, "j"+strconv.FormatInt(o, 10), decide("j"+strconv.FormatInt(o, 10), o), throttle.Capped)
	}
	var called []string
	for range 4 {
		w := ce.finish(t, running)
		called = append(called, w...)
		o, _ := strconv.ParseInt(w[0][1:], 10, 64)
		running = decide(w[0], o)
	}
	if want := []string{"j2", "j3", "j4", "j5"}; !slices.Equal(called, want) {
		t.Fatalf("called %v, want %v", called, want)
	}
}

// Rate and cap together: a job the rate makes wait takes no lease (it is
// charged, and holds its slot); back at its slot, it takes one. A job
// waiting for a lease is not charged.
func TestCapWithRate(t *testing.T) {
	perMinute := throttle.PerMinute(1, 1)
	ce := newCapEnv(t, throttle.Rules{Default: throttle.Policy{Limits: throttle.Limits{perMinute}, Running: 1}}, throttle.CapOptions{})
	j1 := ce.job(t, "acme", "j1")
	wantOutcome(t, "j1", j1, throttle.Admitted)
	j2 := ce.job(t, "acme", "j2")
	wantOutcome(t, "j2 while j1 runs", j2, throttle.Capped)
	ce.finish(t, j1)
	// j2 was called; the rate makes it wait 60 s for its slot.
	j2 = ce.job(t, "acme", "j2")
	if j2.Outcome != throttle.Reserved || j2.Wait != time.Minute || j2.Lease.Token != "" {
		t.Fatalf("j2 called: %+v, want Reserved for 60s, no lease", j2.Decision)
	}
	// Its place is kept for it: a newcomer waits for a lease, uncharged.
	wantOutcome(t, "j3", ce.job(t, "acme", "j3"), throttle.Capped)
	ce.now = t0.Add(time.Minute)
	j2 = ce.job(t, "acme", "j2")
	if j2.Outcome != throttle.Admitted || j2.Lease.Token == "" {
		t.Fatalf("j2 at its slot: %+v, want Admitted with a lease", j2.Decision)
	}
	ce.finish(t, j2)
	// j3 was not charged while it waited: the next slot is 60 s after j2's.
	j3 := ce.job(t, "acme", "j3")
	if j3.Outcome != throttle.Reserved || j3.Wait != time.Minute {
		t.Fatalf("j3: %+v, want Reserved for 60s", j3.Decision)
	}
}

// A cap-only tenant keeps owner records: a job admitted as one incarnation
// makes every other a Duplicate, which does not queue.
func TestCapDuplicate(t *testing.T) {
	ce := newCapEnv(t, throttle.Rules{Default: throttle.Policy{Running: 1}}, throttle.CapOptions{})
	j1 := ce.job(t, "acme", "j1")
	r := ce.c.DecideBatch(context.Background(), []throttle.Copy{{Request: throttle.Request{Tenant: "acme", JobID: "j1", At: ce.now}, Incarnation: 999}})
	if r[0].Err != nil || r[0].Outcome != throttle.Duplicate || r[0].Owner != 101 {
		t.Fatalf("another incarnation of j1: %+v, want Duplicate of 101", r[0])
	}
	ce.finish(t, j1)
	wantOutcome(t, "j2", ce.job(t, "acme", "j2"), throttle.Admitted)
}

// The fleet's cap holds every tenant together; a tenant's own cap holds it
// within that, and a job it holds gives its fleet lease back.
func TestFleetCap(t *testing.T) {
	rules := throttle.Rules{Default: throttle.Policy{Limits: throttle.Limits{throttle.PerMinute(1000, 1000)}},
		Tenants: map[string]throttle.Policy{"capped": {Running: 1}}}
	ce := newCapEnv(t, rules, throttle.CapOptions{MaxRunning: 3})
	a1, b1 := ce.job(t, "a", "a1"), ce.job(t, "b", "b1")
	wantOutcome(t, "a1", a1, throttle.Admitted)
	if a1.FleetLease.Token == "" || a1.FleetLease.Tenant != "" || a1.Lease.Token != "" {
		t.Fatalf("a1 leases %+v / %+v: want a fleet lease only", a1.Lease, a1.FleetLease)
	}
	c1 := ce.job(t, "capped", "c1")
	if c1.Outcome != throttle.Admitted || len(c1.Leases()) != 2 {
		t.Fatalf("c1: %+v, want Admitted with its tenant's and the fleet's leases", c1.Decision)
	}
	// The fleet is full: b2 waits for it, not for b.
	b2 := ce.job(t, "b", "b2")
	if b2.Outcome != throttle.Capped || b2.CappedBy != "max running:3" {
		t.Fatalf("b2: %+v, want Capped by max running:3", b2.Decision)
	}
	w := ce.finish(t, a1)
	if len(w) != 1 || w[0] != "b2" {
		t.Fatalf("a1 done woke %v, want [b2]", w)
	}
	wantOutcome(t, "b2 back", ce.job(t, "b", "b2"), throttle.Admitted)
	ce.finish(t, b1)
	// capped's own cap holds c2; its fleet lease goes back at once.
	c2 := ce.job(t, "capped", "c2")
	if c2.Outcome != throttle.Capped || c2.CappedBy != "running:1" {
		t.Fatalf("c2: %+v, want Capped by running:1", c2.Decision)
	}
	wantOutcome(t, "a2", ce.job(t, "a", "a2"), throttle.Admitted)
}

// Bad arguments are refused before anything is written, with the code
// and position at fault; a lease set of another type is WRONGTYPE.
func TestCapInvalid(t *testing.T) {
	ce := newCapEnv(t, throttle.Rules{Default: throttle.Policy{Running: 1}}, throttle.CapOptions{})
	admit := "admit_" + strings.TrimPrefix(decideFn(), "decide_")
	lk, wk, pk := ce.prefix+":{acme}:r", ce.prefix+":{acme}:w", ce.prefix+":{acme}:p"
	good := []string{"1", "tok", "1000", "1000", "1000", "j1", "0", "0"}
	for _, tc := range []struct {
		at   int
		val  string
		code throttle.Code
	}{
		{0, "0", throttle.CodeCap}, {0, "1.5", throttle.CodeCap}, {1, "c:j1", throttle.CodeToken},
		{1, "", throttle.CodeToken}, {2, "0", throttle.CodeTTL}, {5, "a b", throttle.CodeMember}, {6, "-1", throttle.CodeMember},
		{7, "-1", throttle.CodeNow},
	} {
		args := slices.Clone(good)
		args[tc.at] = tc.val
		v, err := fcallErr(ce.rdb, admit, []string{lk, wk, pk}, args)
		if err != nil || v[0] != 3 || throttle.Code(v[1]) != tc.code || int(v[2]) != tc.at+1 {
			t.Errorf("ARGV[%d]=%q: %v %v, want INVALID code %d at %d", tc.at+1, tc.val, v, err, tc.code, tc.at+1)
		}
	}
	if n := len(keys(t, ce.rdb, ce.prefix)); n != 0 {
		t.Fatalf("%d keys written by refused calls", n)
	}
	ce.rdb.Set(context.Background(), lk, "x", 0)
	r := ce.c.DecideBatch(context.Background(), []throttle.Copy{{Request: throttle.Request{Tenant: "acme", JobID: "j1"}, Incarnation: 1}})
	if !errors.Is(r[0].Err, throttle.ErrRedis) {
		t.Fatalf("lease set of another type: %+v, want a WRONGTYPE Redis error", r[0])
	}
}

// The running term parses wherever a spec may hold it, alone or with
// limits, and prints back; bad caps are refused with the term named.
func TestParsePolicyRunning(t *testing.T) {
	for spec, want := range map[string]throttle.Policy{
		"running:2":                {Running: 2},
		"50/s:100+running:5":       {Limits: throttle.Limits{throttle.PerSecond(50, 100)}, Running: 5},
		" running:7 + 10/m+shadow": {Limits: throttle.Limits{throttle.PerMinute(10, 10)}, Running: 7, Shadow: true},
	} {
		p, err := throttle.ParsePolicy(spec, 0)
		if err != nil || p.Running != want.Running || p.Shadow != want.Shadow || p.Limits.String() != want.Limits.String() {
			t.Errorf("ParsePolicy(%q) = %+v, %v; want %+v", spec, p, err, want)
			continue
		}
		if back, err := throttle.ParsePolicy(p.String(), 0); err != nil || back.String() != p.String() {
			t.Errorf("%q prints as %q, which reads back as %+v, %v", spec, p.String(), back, err)
		}
	}
	for _, spec := range []string{"running:0", "running:-1", "running:1.5", "running:", "running:2+running:3", "running:1000001", "shadow"} {
		if _, err := throttle.ParsePolicy(spec, 0); err == nil {
			t.Errorf("ParsePolicy(%q) accepted", spec)
		}
	}
}

// The fleet's waiting list calls the tenants in turn: a tenant's backlog
// does not make a tenant that came later wait behind all of it.
func TestFleetCapIsFair(t *testing.T) {
	rules := throttle.Rules{Default: throttle.Policy{Limits: throttle.Limits{throttle.PerMinute(1000, 1000)}}}
	ce := newCapEnv(t, rules, throttle.CapOptions{MaxRunning: 1})
	running := ce.job(t, "a", "a1")
	for _, id := range []string{"a2", "a3", "a4"} {
		wantOutcome(t, id, ce.job(t, "a", id), throttle.Capped)
	}
	if b1 := ce.job(t, "b", "b1"); b1.Outcome != throttle.Capped || b1.Ahead != 1 {
		t.Fatalf("b1: %+v, want Capped behind a2 only", b1.Decision)
	}
	var order []string
	for range 4 {
		w := ce.finish(t, running)
		if len(w) != 1 {
			t.Fatalf("woke %v after %v, want one job", w, order)
		}
		order = append(order, w[0])
		tenant := w[0][:1]
		running = ce.job(t, tenant, w[0])
		wantOutcome(t, w[0]+" back", running, throttle.Admitted)
	}
	if want := []string{"a2", "b1", "a3", "a4"}; !slices.Equal(order, want) {
		t.Fatalf("called %v, want %v: the tenants in turn", order, want)
	}
}

// A job its tenant's cap called (it came back woken) and the fleet's cap
// holds back waits at the head of the fleet's list, not behind its
// tenant's other jobs there, which its tenant's cap would refuse while it
// holds the tenant's room; a job not called joins at its fair place.
func TestWokenJobWaitsAtTheFleetsHead(t *testing.T) {
	rules := throttle.Rules{Default: throttle.Policy{Limits: throttle.Limits{throttle.PerMinute(1000, 1000)}}}
	ce := newCapEnv(t, rules, throttle.CapOptions{MaxRunning: 1})
	ctx := context.Background()
	decideAt := func(tenant, id string, woken bool) throttle.Result {
		t.Helper()
		inc, _ := strconv.ParseInt(id[1:], 10, 64)
		r := ce.c.DecideBatch(ctx, []throttle.Copy{{Request: throttle.Request{Tenant: tenant, JobID: id, At: ce.now},
			Incarnation: 100 + inc, Woken: woken}})
		if r[0].Err != nil {
			t.Fatalf("%s/%s: %v", tenant, id, r[0].Err)
		}
		return r[0]
	}
	running := decideAt("a", "a1", false)
	wantOutcome(t, "a1", running, throttle.Admitted)
	for _, id := range []string{"b2", "b3", "b4"} {
		wantOutcome(t, id, decideAt("b", id, false), throttle.Capped)
	}
	for _, id := range []string{"a2", "a3"} {
		wantOutcome(t, id, decideAt("a", id, false), throttle.Capped)
	}
	if late := decideAt("b", "b6", false); late.Outcome != throttle.Capped || late.Ahead != 5 {
		t.Fatalf("b6, not called: %+v, want Capped behind all 5 (b's at its fair place)", late.Decision)
	}
	if woken := decideAt("b", "b5", true); woken.Outcome != throttle.Capped || woken.Ahead != 0 {
		t.Fatalf("b5, called by b's cap: %+v, want Capped at the head (none ahead)", woken.Decision)
	}
	if w := ce.finish(t, running); len(w) != 1 || w[0] != "b5" {
		t.Fatalf("the fleet's room woke %v, want b5 first", w)
	}
}

// A copy the fleet's cap holds gives up an owner record that names it, as
// one the tenant's cap holds does: its incarnation ran (its worker died),
// and the copy its park makes must run, not be taken for a duplicate.
func TestCappedGivesUpItsOwnerRecord(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rules throttle.Rules
		o     throttle.CapOptions
	}{
		{"tenant's cap", throttle.Rules{Default: throttle.Policy{Running: 1}}, throttle.CapOptions{}},
		{"fleet's cap", throttle.Rules{Default: throttle.Policy{Limits: throttle.Limits{throttle.PerMinute(1000, 1000)}}},
			throttle.CapOptions{MaxRunning: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ce := newCapEnv(t, tc.rules, tc.o)
			ctx := context.Background()
			other := ce.job(t, "acme", "j1") // holds the one place
			// j2 was admitted as incarnation 102 (recorded owner), and its
			// worker died: redelivered, the cap is full.
			claimed, _, err := ce.c.Claim(ctx, "acme", "j2", 102)
			if err != nil || !claimed {
				t.Fatalf("Claim: %v %v", claimed, err)
			}
			wantOutcome(t, "j2 redelivered", ce.job(t, "acme", "j2"), throttle.Capped)
			ce.finish(t, other)
			// Its parked copy, another incarnation, runs.
			r := ce.c.DecideBatch(ctx, []throttle.Copy{{Request: throttle.Request{Tenant: "acme", JobID: "j2", At: ce.now}, Incarnation: 900}})
			if r[0].Err != nil || r[0].Outcome != throttle.Admitted {
				t.Fatalf("j2's parked copy: %+v, want Admitted", r[0])
			}
		})
	}
}

package throttle_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// A held tenant's next decision waits until the hold ends (plus the one
// token's time its empty buckets need), whatever tokens it had; another
// tenant is unaffected, and a bucket already in debt past the hold keeps
// its debt. Per-minute rates and fixed times: nothing expires by Redis's
// real clock while the test runs.
func TestHold(t *testing.T) {
	ctx := context.Background()
	perMinute := throttle.PerMinute(6, 6) // one token every 10 s
	limits := throttle.Limits{perMinute, throttle.PerHour(600, 600)}

	t.Run("held until, then one token a period", func(t *testing.T) {
		e := setup(t)
		l := newLimiter(t, e.rdb, e.prefix, time.Hour, limits)
		until := t0.Add(2 * time.Minute)
		if err := l.HoldAt(ctx, "acme", t0, until); err != nil {
			t.Fatalf("HoldAt: %v", err)
		}
		at := t0.Add(30 * time.Second)
		d := decide(t, l, throttle.Request{Tenant: "acme", JobID: "a1", At: at})
		if d.Outcome != throttle.Reserved || d.Wait != until.Sub(at)+10*time.Second {
			t.Fatalf("acme after the hold: %+v, want Reserved waiting %s", d, until.Sub(at)+10*time.Second)
		}
		// A full bucket at until would have admitted at once: it is empty.
		d = decide(t, l, throttle.Request{Tenant: "acme", JobID: "a2", At: until})
		if d.Outcome != throttle.Reserved || d.Wait != 20*time.Second {
			t.Fatalf("acme at until: %+v, want Reserved waiting 20s (one slot taken)", d)
		}
		if d := decide(t, l, throttle.Request{Tenant: "globex", JobID: "g1", At: at}); d.Outcome != throttle.Admitted {
			t.Fatalf("globex during acme's hold: %+v, want Admitted", d)
		}
	})

	t.Run("a later debt is kept", func(t *testing.T) {
		e := setup(t)
		l := newLimiter(t, e.rdb, e.prefix, time.Hour, limits)
		for i := range 20 { // 6 admitted, 14 reserved: the per-minute bucket is in debt 140 s
			decide(t, l, throttle.Request{Tenant: "acme", JobID: "r" + string(rune('a'+i)), At: t0})
		}
		if err := l.HoldAt(ctx, "acme", t0, t0.Add(time.Minute)); err != nil {
			t.Fatalf("HoldAt: %v", err)
		}
		d := decide(t, l, throttle.Request{Tenant: "acme", JobID: "next", At: t0})
		if d.Outcome != throttle.Reserved || d.Wait != 150*time.Second {
			t.Fatalf("after a shorter hold: %+v, want Reserved waiting 150s", d)
		}
	})

	t.Run("past and invalid holds", func(t *testing.T) {
		e := setup(t)
		l := newLimiter(t, e.rdb, e.prefix, time.Hour, limits)
		if err := l.HoldAt(ctx, "acme", t0, t0.Add(-time.Second)); err != nil {
			t.Fatalf("a hold in the past: %v", err)
		}
		if d := decide(t, l, throttle.Request{Tenant: "acme", JobID: "a", At: t0}); d.Outcome != throttle.Admitted {
			t.Fatalf("after a hold in the past: %+v, want Admitted", d)
		}
		err := l.HoldAt(ctx, "acme", t0, t0.Add(31*24*time.Hour))
		if !errors.Is(err, throttle.ErrInvalid) {
			t.Fatalf("a hold of 31 days: %v, want ErrInvalid", err)
		}
		if err := l.HoldAt(ctx, "", t0, t0.Add(time.Second)); !errors.Is(err, throttle.ErrInvalid) {
			t.Fatalf("an empty tenant: %v, want ErrInvalid", err)
		}
	})

	t.Run("a key of another type", func(t *testing.T) {
		e := setup(t)
		l := newLimiter(t, e.rdb, e.prefix, time.Hour, limits)
		// The per-hour bucket (keys.go: <prefix>:{tenant}:l:<period µs>).
		if err := e.rdb.LPush(ctx, e.prefix+":{acme}:l:3600000000", "x").Err(); err != nil {
			t.Fatal(err)
		}
		err := l.HoldAt(ctx, "acme", t0, t0.Add(time.Minute))
		if !errors.Is(err, throttle.ErrRedis) {
			t.Fatalf("a hold over a list: %v, want ErrRedis", err)
		}
		if n := len(keys(t, e.rdb, e.prefix)); n != 1 {
			t.Fatalf("%d keys after a refused hold, want the list alone", n)
		}
	})

	t.Run("shadowed tenant holds nothing", func(t *testing.T) {
		e := setup(t)
		l, err := throttle.New(e.rdb, throttle.Options{Policies: throttle.Rules{Default: throttle.Policy{Limits: limits, Shadow: true}}, Horizon: time.Hour, Prefix: e.prefix})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.HoldAt(ctx, "acme", t0, t0.Add(time.Minute)); err != nil {
			t.Fatalf("HoldAt: %v", err)
		}
		if ks := keys(t, e.rdb, e.prefix); len(ks) != 0 {
			t.Fatalf("a shadowed hold wrote %v", ks)
		}
	})
}

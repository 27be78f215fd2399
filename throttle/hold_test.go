package throttle_test

import (
	"context"
	"errors"
	"strings"
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

	t.Run("the job told to wait goes first", func(t *testing.T) {
		e := setup(t)
		l := newLimiter(t, e.rdb, e.prefix, time.Hour, limits)
		dc, err := throttle.NewDecider(l, nil)
		if err != nil {
			t.Fatal(err)
		}
		until := t0.Add(2 * time.Minute)
		for _, id := range []string{"told", "copy"} {
			if err := l.HoldJobAt(ctx, "acme", id, t0, until); err != nil {
				t.Fatalf("HoldJobAt %s: %v", id, err)
			}
		}
		// Jobs arriving during the hold get the slots after until's.
		at := t0.Add(30 * time.Second)
		for i, id := range []string{"n1", "n2"} {
			want := time.Duration(i+1)*10*time.Second + until.Sub(at)
			if d := decide(t, l, throttle.Request{Tenant: "acme", JobID: id, At: at}); d.Outcome != throttle.Reserved || d.Wait != want {
				t.Fatalf("%s during the hold: %+v, want Reserved waiting %s", id, d, want)
			}
		}
		// Back early, the job told to wait is told the rest of its wait.
		if d := decide(t, l, throttle.Request{Tenant: "acme", JobID: "told", At: at}); d.Outcome != throttle.Reserved || d.Wait != until.Sub(at) {
			t.Fatalf("the job told to wait, back early: %+v, want Reserved waiting %s", d, until.Sub(at))
		}
		// At until it runs, uncharged, through the Limiter and through the
		// worker's Decider (its owner and shift keys) alike.
		if d := decide(t, l, throttle.Request{Tenant: "acme", JobID: "told", At: until}); d.Outcome != throttle.Admitted {
			t.Fatalf("the job told to wait, at until: %+v, want Admitted", d)
		}
		d, err := dc.Decide(ctx, throttle.Copy{Request: throttle.Request{Tenant: "acme", JobID: "copy", At: until}, Incarnation: 7})
		if err != nil || d.Outcome != throttle.Admitted {
			t.Fatalf("the job told to wait, decided by the worker at until: %+v, %v; want Admitted", d, err)
		}
		want := 30 * time.Second // after n1's and n2's slots
		if d := decide(t, l, throttle.Request{Tenant: "acme", JobID: "n3", At: until}); d.Outcome != throttle.Reserved || d.Wait != want {
			t.Fatalf("a new job at until: %+v, want Reserved waiting %s (no slot taken by the jobs told to wait)", d, want)
		}
	})

	t.Run("a tenant with a window holds, its job decided again", func(t *testing.T) {
		e := setup(t)
		windowed := throttle.Limits{perMinute, throttle.SlidingWindow(100, time.Minute)}
		l := newLimiter(t, e.rdb, e.prefix, time.Hour, windowed)
		if err := l.HoldJobAt(ctx, "acme", "told", t0, t0.Add(time.Minute)); err != nil {
			t.Fatalf("HoldJobAt: %v", err)
		}
		for _, k := range keys(t, e.rdb, e.prefix) {
			if strings.Contains(k, ":j:") {
				t.Fatalf("a slot reserved under limits with a window: %s", k)
			}
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

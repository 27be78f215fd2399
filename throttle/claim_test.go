package throttle_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// TestClaimOwner: a claim makes an incarnation the owner of a job no one
// owns, for as long as a decision keeps the record; the claimed
// incarnation is then decided as usual and every other one is a
// Duplicate naming it. A second claim never takes the job from its owner;
// giving up deletes the record only for the incarnation it names; bad
// arguments and a damaged record are refused before anything is written.
func TestClaimOwner(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	// Fill time of 5/s with a burst of 10: 2s; horizon 10s.
	l := newLimiter(t, e.rdb, e.prefix, 10*time.Second, throttle.Limits{throttle.PerSecond(5, 10)})
	c := newEngine(t, l)
	key := e.prefix + ":{a}:o:j"
	const claim = int64(1<<52 + 17)

	ok, owner, err := c.Claim(ctx, "a", "j", claim)
	if err != nil || !ok || owner != claim {
		t.Fatalf("first claim = %v, %d, %v; want true, %d", ok, owner, err, claim)
	}
	ttl, err := e.rdb.PTTL(ctx, key).Result()
	if err != nil || ttl < 11*time.Second || ttl > 12*time.Second {
		t.Fatalf("record TTL %s (%v), want about 12s (horizon 10s + fill 2s)", ttl, err)
	}
	if ok, owner, err := c.Claim(ctx, "a", "j", 5); err != nil || ok || owner != claim {
		t.Fatalf("second claim = %v, %d, %v; want false, %d", ok, owner, err, claim)
	}

	// The original, fresh, is a duplicate of the claim; the claimed
	// incarnation is admitted.
	dup := decideCopy(t, c, throttle.Copy{Request: throttle.Request{Tenant: "a", JobID: "j"}, Fresh: true})
	if dup.Outcome != throttle.Duplicate || dup.Owner != claim {
		t.Fatalf("original after the claim: %+v, want a duplicate of %d", dup, claim)
	}
	if d := decideCopy(t, c, throttle.Copy{Request: throttle.Request{Tenant: "a", JobID: "j"}, Incarnation: claim}); d.Outcome != throttle.Admitted {
		t.Fatalf("claimed incarnation: %+v, want allowed", d)
	}

	if ok, err := c.Release(ctx, "a", "j", 5); err != nil || ok {
		t.Fatalf("release by another incarnation = %v, %v; want false", ok, err)
	}
	if ok, err := c.Release(ctx, "a", "j", claim); err != nil || !ok {
		t.Fatalf("release by the owner = %v, %v; want true", ok, err)
	}
	if n, _ := e.rdb.Exists(ctx, key).Result(); n != 0 {
		t.Fatal("record left after its owner gave it up")
	}
	if d := decideCopy(t, c, throttle.Copy{Request: throttle.Request{Tenant: "a", JobID: "j"}, Fresh: true}); d.Outcome != throttle.Admitted {
		t.Fatalf("original after the release: %+v, want allowed", d)
	}

	// Refused before any write.
	for _, bad := range []struct {
		name        string
		tenant, job string
		inc         int64
	}{
		{"negative incarnation", "a", "k", -1},
		{"incarnation 2^53", "a", "k", 1 << 53},
		{"empty job id", "a", "", 1},
		{"empty tenant", "", "k", 1},
	} {
		if _, _, err := c.Claim(ctx, bad.tenant, bad.job, bad.inc); !errors.Is(err, throttle.ErrInvalid) {
			t.Errorf("claim with %s: %v, want ErrInvalid", bad.name, err)
		}
	}
	if n, _ := e.rdb.Exists(ctx, e.prefix+":{a}:o:k").Result(); n != 0 {
		t.Fatal("a refused claim wrote the record")
	}
	if err := e.rdb.Set(ctx, key, "x1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Claim(ctx, "a", "j", 3); !errors.Is(err, throttle.ErrInvalid) {
		t.Fatalf("claim over a damaged record: %v, want ErrInvalid", err)
	}
	if _, err := c.Release(ctx, "a", "j", 3); !errors.Is(err, throttle.ErrInvalid) {
		t.Fatalf("release of a damaged record: %v, want ErrInvalid", err)
	}
	if v, _ := e.rdb.Get(ctx, key).Result(); v != "x1" {
		t.Fatalf("damaged record changed to %q", v)
	}
}

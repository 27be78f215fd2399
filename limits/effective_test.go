package limits

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

// TestResolve reads the policy a tenant gets, as the workers apply the
// bucket over the environment, from a real bucket.
func TestResolve(t *testing.T) {
	n := testenv.StartNATS(t, "")
	js, err := jetstream.New(n.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := OpenBucket(ctx, js, "limits", 1)
	if err != nil {
		t.Fatal(err)
	}
	again, err := OpenBucket(ctx, js, "limits", 1)
	if err != nil || again.Bucket() != "limits" {
		t.Fatalf("opening an existing bucket: %v, %v", again, err)
	}
	env := throttle.Rules{
		Default: throttle.Enforce(throttle.PerSecond(100, 100)),
		Tenants: map[string]throttle.Policy{"globex": throttle.Enforce(throttle.PerSecond(5, 5))},
	}
	resolve := func(tenant string) Effective {
		t.Helper()
		e, err := Resolve(ctx, kv, env, Reader{}, tenant)
		if err != nil {
			t.Fatalf("Resolve(%s): %v", tenant, err)
		}
		return e
	}
	if e := resolve("acme"); e.Source.Where != "THROTTLER_DEFAULT_LIMIT" || e.Policy.String() != "100/s:100" {
		t.Fatalf("acme with an empty bucket: %+v", e)
	}
	put := func(key, value string) uint64 {
		t.Helper()
		rev, err := kv.PutString(ctx, key, value)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	rev := put("_default", "7/s")
	if e := resolve("acme"); e.Source.Where != "bucket _default" || e.Source.Revision != rev || e.Policy.String() != "7/s:7" {
		t.Fatalf("acme under the bucket's default: %+v", e)
	}
	if e := resolve("globex"); e.Source.Where != "THROTTLER_TENANT_LIMITS" {
		t.Fatalf("globex, in the environment: %+v", e)
	}
	good := put("acme", "1/m:3")
	put("acme", "3/fortnight")
	e := resolve("acme")
	if e.Source.Where != "bucket" || e.Source.Revision != good || e.Policy.String() != "1/m:3" || e.Source.Ignored == nil || e.Source.Ignored.Value != "3/fortnight" {
		t.Fatalf("acme with a bad latest value: %+v, want its latest good one and the bad one noted", e)
	}
	if err := kv.Delete(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if e := resolve("acme"); e.Source.Where != "bucket _default" {
		t.Fatalf("acme deleted: %+v, want the bucket's default", e)
	}
	if e, err := Resolve(ctx, nil, env, Reader{}, "acme"); err != nil || e.Source.Where != "THROTTLER_DEFAULT_LIMIT" {
		t.Fatalf("no bucket: %+v, %v", e, err)
	}
}

// TestResolveAsTheWorkersOfTheEnvironment reads a running cap stored for a
// fleet that forwards: the workers ignore it and keep the key's latest good
// value, and Resolve says so, naming the value and the reason; a key that
// never held a good value gives the environment's limit, the bad value
// still noted.
func TestResolveAsTheWorkersOfTheEnvironment(t *testing.T) {
	n := testenv.StartNATS(t, "")
	js, err := jetstream.New(n.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := OpenBucket(ctx, js, "limits", 1)
	if err != nil {
		t.Fatal(err)
	}
	env := throttle.Rules{Default: throttle.Enforce(throttle.PerSecond(100, 100))}
	good, err := kv.PutString(ctx, "globex", "5/m")
	if err != nil {
		t.Fatal(err)
	}
	bad, err := kv.PutString(ctx, "globex", "running:2")
	if err != nil {
		t.Fatal(err)
	}
	forward := Reader{NoCaps: true}
	e, err := Resolve(ctx, kv, env, forward, "globex")
	if err != nil {
		t.Fatal(err)
	}
	if e.Policy.String() != "5/m:5" || e.Source.Revision != good || e.Source.Ignored == nil ||
		e.Source.Ignored.Revision != bad || e.Source.Ignored.Reason != ErrCapNeedsHTTP.Error() {
		t.Fatalf("globex with running:2 on a forwarding fleet: %+v (ignored %+v), want 5/m:5 from revision %d and revision %d ignored for its cap", e, e.Source.Ignored, good, bad)
	}
	if e, _ := Resolve(ctx, kv, env, Reader{}, "globex"); e.Policy.String() != "running:2" || e.Source.Ignored != nil {
		t.Fatalf("globex on an http fleet: %+v, want running:2 applied", e)
	}
	if _, err := kv.PutString(ctx, "initech", "running:3"); err != nil {
		t.Fatal(err)
	}
	e, err = Resolve(ctx, kv, env, forward, "initech")
	if err != nil {
		t.Fatal(err)
	}
	if e.Source.Where != "THROTTLER_DEFAULT_LIMIT" || e.Source.Ignored == nil || e.Source.Ignored.Key != "initech" {
		t.Fatalf("initech with only a bad value: %+v (ignored %+v), want the default and the value noted", e, e.Source.Ignored)
	}
}

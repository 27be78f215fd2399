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
		e, err := Resolve(ctx, kv, env, 0, false, tenant)
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
	if e.Source.Where != "bucket" || e.Source.Revision != good || e.Policy.String() != "1/m:3" || e.Source.Ignored == "" {
		t.Fatalf("acme with a bad latest value: %+v, want its latest good one and the bad one noted", e)
	}
	if err := kv.Delete(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if e := resolve("acme"); e.Source.Where != "bucket _default" {
		t.Fatalf("acme deleted: %+v, want the bucket's default", e)
	}
	if e, err := Resolve(ctx, nil, env, 0, false, "acme"); err != nil || e.Source.Where != "THROTTLER_DEFAULT_LIMIT" {
		t.Fatalf("no bucket: %+v, %v", e, err)
	}
}

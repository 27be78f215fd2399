package limits

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/throttle"
)

// Source says where a tenant's policy comes from.
type Source struct {
	// Where is "bucket" (the tenant's key), "bucket _default",
	// "THROTTLER_TENANT_LIMITS" or "THROTTLER_DEFAULT_LIMIT".
	Where string `json:"where"`
	// Revision and Written are those of the bucket value applied, when
	// it comes from the bucket.
	Revision uint64    `json:"revision,omitempty"`
	Written  time.Time `json:"written,omitzero"`
	// Ignored describes a newer value of the key that could not be read
	// and is ignored, if any.
	Ignored string `json:"ignored,omitempty"`
}

// Effective is a tenant's policy as the workers apply it, and its source.
type Effective struct {
	Policy throttle.Policy
	Source Source
}

// Resolve reads the policy that applies to tenant, as a Watcher applies
// the bucket over env: the tenant's key, its entry in env, the bucket's
// DefaultKey, env's default. kv may be nil (no bucket).
func Resolve(ctx context.Context, kv jetstream.KeyValue, env throttle.Rules, defaultBurst int64, shadowAll bool, tenant string) (Effective, error) {
	if kv != nil {
		e, ok, err := fromBucket(ctx, kv, tenant, defaultBurst, shadowAll)
		if err != nil || ok {
			return e, err
		}
	}
	if p, ok := env.Tenants[tenant]; ok {
		return Effective{Policy: p, Source: Source{Where: "THROTTLER_TENANT_LIMITS"}}, nil
	}
	if kv != nil {
		e, ok, err := fromBucket(ctx, kv, DefaultKey, defaultBurst, shadowAll)
		if err != nil || ok {
			e.Source.Where = "bucket " + DefaultKey
			return e, err
		}
	}
	return Effective{Policy: env.Default, Source: Source{Where: "THROTTLER_DEFAULT_LIMIT"}}, nil
}

// fromBucket reads key's latest value that can be read, noting a newer one
// that cannot; ok is false when the key has none.
func fromBucket(ctx context.Context, kv jetstream.KeyValue, key string, defaultBurst int64, shadowAll bool) (Effective, bool, error) {
	hist, err := kv.History(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Effective{}, false, nil
	}
	if err != nil {
		return Effective{}, false, fmt.Errorf("reading %s in the limits bucket: %w", key, err)
	}
	var ignored string
	for i := len(hist) - 1; i >= 0; i-- {
		e := hist[i]
		if e.Operation() != jetstream.KeyValuePut {
			break
		}
		p, err := Spec(string(e.Value()), defaultBurst, shadowAll)
		if err == nil {
			return Effective{Policy: p, Source: Source{Where: "bucket", Revision: e.Revision(), Written: e.Created(), Ignored: ignored}}, true, nil
		}
		if ignored == "" {
			ignored = fmt.Sprintf("revision %d, %q: %v", e.Revision(), e.Value(), err)
		}
	}
	return Effective{}, false, nil
}

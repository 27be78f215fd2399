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
	// Ignored is the newest value stored for the tenant (its key, or
	// _default's when the policy comes from there or below) that the
	// workers ignore, if any: the policy above applies instead.
	Ignored *Ignored `json:"ignored,omitempty"`
}

// Ignored is a value stored in the bucket that the workers ignore, and why.
type Ignored struct {
	Key      string `json:"key"`
	Revision uint64 `json:"revision"`
	Value    string `json:"value"`
	Reason   string `json:"reason"`
}

// String says which value is ignored and why, in one line.
func (i Ignored) String() string {
	return fmt.Sprintf("%s's value %q (revision %d) is ignored by the workers: %s", i.Key, i.Value, i.Revision, i.Reason)
}

// Effective is a tenant's policy as the workers apply it, and its source.
type Effective struct {
	Policy throttle.Policy
	Source Source
}

// Resolve reads the policy that applies to tenant, as a Watcher reading
// values with r applies the bucket over env: the tenant's key, its entry
// in env, the bucket's DefaultKey, env's default. A key whose newest
// values the workers ignore gives its latest value they read, as a worker
// keeps (or, started on the bad value, takes from the key's history); the
// first such value met is noted in Source.Ignored. kv may be nil (no
// bucket).
func Resolve(ctx context.Context, kv jetstream.KeyValue, env throttle.Rules, r Reader, tenant string) (Effective, error) {
	var ignored *Ignored
	note := func(e Effective) Effective {
		if e.Source.Ignored == nil {
			e.Source.Ignored = ignored
		}
		return e
	}
	if kv != nil {
		e, ok, err := fromBucket(ctx, kv, tenant, r)
		if err != nil || ok {
			return e, err
		}
		ignored = e.Source.Ignored
	}
	if p, ok := env.Tenants[tenant]; ok {
		return note(Effective{Policy: p, Source: Source{Where: "THROTTLER_TENANT_LIMITS"}}), nil
	}
	if kv != nil {
		e, ok, err := fromBucket(ctx, kv, DefaultKey, r)
		if err != nil {
			return e, err
		}
		if ok {
			e.Source.Where = "bucket " + DefaultKey
			return note(e), nil
		}
		if ignored == nil {
			ignored = e.Source.Ignored
		}
	}
	return note(Effective{Policy: env.Default, Source: Source{Where: "THROTTLER_DEFAULT_LIMIT"}}), nil
}

// fromBucket reads key's latest value that r reads, noting in
// Source.Ignored the newest one it cannot; ok is false when the key has
// none (Source.Ignored may still be set).
func fromBucket(ctx context.Context, kv jetstream.KeyValue, key string, r Reader) (Effective, bool, error) {
	hist, err := kv.History(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Effective{}, false, nil
	}
	if err != nil {
		return Effective{}, false, fmt.Errorf("reading %s in the limits bucket: %w", key, err)
	}
	var ignored *Ignored
	for i := len(hist) - 1; i >= 0; i-- {
		e := hist[i]
		if e.Operation() != jetstream.KeyValuePut {
			break
		}
		p, err := r.Read(key, string(e.Value()))
		if err == nil {
			return Effective{Policy: p, Source: Source{Where: "bucket", Revision: e.Revision(), Written: e.Created(), Ignored: ignored}}, true, nil
		}
		if ignored == nil {
			ignored = &Ignored{Key: key, Revision: e.Revision(), Value: string(e.Value()), Reason: err.Error()}
		}
	}
	return Effective{Source: Source{Ignored: ignored}}, false, nil
}

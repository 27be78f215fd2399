package limits

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// History is how many values of a key the bucket keeps, for
// `throttler limits history`: the most JetStream allows.
const History = 64

// OpenBucket returns the key-value bucket name, creating it when missing
// with replicas replicas (the jobs stream's, so that limits are as safe as
// jobs) and History values a key. An existing bucket is used as it is:
// its configuration is the operator's.
func OpenBucket(ctx context.Context, js jetstream.JetStream, name string, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, name)
	if err == nil {
		return kv, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("opening the limits bucket %s: %w", name, err)
	}
	kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      name,
		Description: "throttler: tenants' limits (key: tenant or _default; value: a spec such as 50/s:100)",
		History:     History,
		Replicas:    max(1, replicas),
		Storage:     jetstream.FileStorage,
	})
	if errors.Is(err, jetstream.ErrBucketExists) {
		// Another worker created it first.
		kv, err = js.KeyValue(ctx, name)
	}
	if err != nil {
		return nil, fmt.Errorf("creating the limits bucket %s: %w", name, err)
	}
	return kv, nil
}

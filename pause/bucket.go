package pause

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// History is how many values of a key the bucket keeps: who paused and
// resumed a tenant lately, for the people who look at it with `nats kv
// history`.
const History = 16

// OpenBucket returns the pause bucket name, creating it when missing with
// replicas replicas (the jobs stream's, so that a pause is as safe as the
// jobs it holds) and file storage, so a pause survives a restart of every
// worker and server. An existing bucket is used as it is.
func OpenBucket(ctx context.Context, js jetstream.JetStream, name string, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, name)
	if err == nil {
		return kv, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("opening the pause bucket %s: %w", name, err)
	}
	kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      name,
		Description: "throttler: paused tenants (key: tenant.<tenant>; value: JSON reason, since, until)",
		History:     History,
		Replicas:    max(1, replicas),
		Storage:     jetstream.FileStorage,
	})
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = js.KeyValue(ctx, name) // another worker created it first
	}
	if err != nil {
		return nil, fmt.Errorf("creating the pause bucket %s: %w", name, err)
	}
	return kv, nil
}

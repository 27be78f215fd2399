package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/limits"
	"github.com/throttler/throttler/throttle"
)

// BucketLimits is the Limits port over the limits bucket, as `throttler
// limits get/set` reads and writes it. Safe for concurrent use.
type BucketLimits struct {
	JetStream jetstream.JetStream
	// Bucket is THROTTLER_LIMITS_BUCKET; "" when off (Set then refuses).
	Bucket string
	// Stream is the jobs stream, whose replicas a new bucket takes.
	Stream string
	// Rules are the environment's policies, Reader how the workers read
	// a bucket value (what they would ignore is refused).
	Rules  throttle.Rules
	Reader limits.Reader
	// BringBack brings a tenant's jobs moved off the consumer for slots
	// under its old limits back, to be decided under the new ones, and
	// returns how many (ops.BringBackMoved), after Set or Remove changed
	// a tenant's limits; nil brings none back.
	BringBack func(ctx context.Context, tenant string) (int, error)
}

// broughtBack brings tenant's moved jobs back into ch after a change of
// its limits, as `throttler limits set` does: not for _default, whose
// change would touch every tenant.
func (b BucketLimits) broughtBack(ctx context.Context, ch LimitsChange) (LimitsChange, error) {
	if b.BringBack == nil || ch.Before == ch.After || ch.Tenant == limits.DefaultKey {
		return ch, nil
	}
	n, err := b.BringBack(ctx, ch.Tenant)
	ch.BroughtBack = n
	if err != nil {
		return ch, fmt.Errorf("the limits are written (revision %d); %w; those jobs come back by themselves at their slots", ch.Revision, err)
	}
	return ch, nil
}

// bucket opens the limits bucket; create makes it when missing, with the
// jobs stream's replicas, as a worker would. Without create a missing
// bucket is nil.
func (b BucketLimits) bucket(ctx context.Context, create bool) (jetstream.KeyValue, error) {
	if b.Bucket == "" {
		return nil, nil
	}
	if !create {
		kv, err := b.JetStream.KeyValue(ctx, b.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, nil
		}
		return kv, err
	}
	replicas := 1
	if s, err := b.JetStream.Stream(ctx, b.Stream); err == nil {
		replicas = s.CachedInfo().Config.Replicas
	}
	return limits.OpenBucket(ctx, b.JetStream, b.Bucket, replicas)
}

// Get returns the limits that apply to tenant and where they come from.
func (b BucketLimits) Get(ctx context.Context, tenant string) (LimitsView, error) {
	kv, err := b.bucket(ctx, false)
	if err != nil {
		return LimitsView{}, fmt.Errorf("the limits bucket: %w", err)
	}
	e, err := limits.Resolve(ctx, kv, b.Rules, b.Reader, tenant)
	if err != nil {
		return LimitsView{}, err
	}
	v := LimitsView{Tenant: tenant, Limits: e.Policy.String(), Where: e.Source.Where, Revision: e.Source.Revision, Written: e.Source.Written}
	if e.Source.Ignored != nil {
		v.Ignored = e.Source.Ignored.String()
	}
	return v, nil
}

// Set writes spec as tenant's limits once the workers' parser has read it.
func (b BucketLimits) Set(ctx context.Context, tenant, spec string) (LimitsChange, error) {
	if b.Bucket == "" {
		return LimitsChange{}, fmt.Errorf("%w: THROTTLER_LIMITS_BUCKET is off: the workers read no limits from NATS", ErrBadInput)
	}
	// What the workers would do with the value, before anything is
	// written: a value they would ignore is refused.
	p, err := b.Reader.Read(tenant, spec)
	if err != nil {
		return LimitsChange{}, fmt.Errorf("%w: %s: the workers would ignore it: %v; nothing written", ErrBadInput, spec, err)
	}
	before, err := b.Get(ctx, tenant)
	if err != nil {
		return LimitsChange{}, err
	}
	kv, err := b.bucket(ctx, true)
	if err != nil {
		return LimitsChange{}, fmt.Errorf("the limits bucket: %w", err)
	}
	rev, err := kv.PutString(ctx, tenant, strings.TrimSpace(spec))
	if err != nil {
		return LimitsChange{}, fmt.Errorf("writing %s: %w", tenant, err)
	}
	return b.broughtBack(ctx, LimitsChange{Tenant: tenant, Before: before.Limits, After: p.String(), Revision: rev})
}

// Remove deletes tenant's value from the bucket, only the value read (a
// write in between is not removed unseen), so that the environment's
// limits apply again.
func (b BucketLimits) Remove(ctx context.Context, tenant string) (LimitsChange, error) {
	before, err := b.Get(ctx, tenant)
	if err != nil {
		return LimitsChange{}, err
	}
	kv, err := b.bucket(ctx, false)
	if err != nil {
		return LimitsChange{}, fmt.Errorf("the limits bucket: %w", err)
	}
	none := LimitsChange{Tenant: tenant, Before: before.Limits, After: before.Limits, Removed: new(bool)}
	if kv == nil {
		return none, nil
	}
	cur, err := kv.Get(ctx, tenant)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return none, nil
	}
	if err != nil {
		return LimitsChange{}, fmt.Errorf("reading %s: %w", tenant, err)
	}
	if err := kv.Delete(ctx, tenant, jetstream.LastRevision(cur.Revision())); err != nil {
		return LimitsChange{}, fmt.Errorf("removing %s (revision %d; if it changed meanwhile, try again): %w", tenant, cur.Revision(), err)
	}
	after, err := b.Get(ctx, tenant)
	if err != nil {
		return LimitsChange{}, err
	}
	removed := true
	return b.broughtBack(ctx, LimitsChange{Tenant: tenant, Before: before.Limits, After: after.Limits, Revision: cur.Revision(), Removed: &removed})
}

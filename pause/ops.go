package pause

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/release"
	"github.com/throttler/throttler/subject"
	"github.com/throttler/throttler/tenant"
)

// ErrInvalid marks a request the operations refuse before touching any
// server: a bad tenant, reason or time.
var ErrInvalid = errors.New("invalid request")

// Options are what the operations need to reach the fleet's pauses.
type Options struct {
	// JetStream reaches the bucket and the jobs stream. Required.
	JetStream jetstream.JetStream
	// Bucket is the pause bucket's name (THROTTLER_PAUSE_BUCKET).
	// Required.
	Bucket string
	// Stream is the jobs stream: Pause creates the bucket with its
	// replicas, Resume releases the paused jobs' copies from it. Required
	// for Pause and Resume.
	Stream string
	// Schedules names the subjects of moved jobs
	// (THROTTLER_SCHEDULE_SUBJECT). Required for Resume.
	Schedules subject.Schedules
	// Settle paces Resume: the pause is deleted half of it after the
	// paused jobs are released, and the copies of jobs the workers were
	// parking meanwhile are released a tenth of it and all of it after
	// the delete. Defaults to 1s.
	Settle time.Duration
	// Now is the clock of Since and of For. Defaults to time.Now.
	Now func() time.Time
}

func (o Options) now() time.Time {
	if o.Now == nil {
		return time.Now()
	}
	return o.Now()
}

// Request is a pause to write.
type Request struct {
	// Tenant is the tenant to pause. Required.
	Tenant string `json:"tenant"`
	// Reason says why, for inspect and top. Optional.
	Reason string `json:"reason,omitempty"`
	// Until, when set, ends the pause by itself then; it must be in the
	// future. For, when positive, sets Until to now plus For; give one or
	// neither.
	Until time.Time     `json:"until,omitzero"`
	For   time.Duration `json:"for,omitempty"`
}

// Check reports every problem of r at once, each matching ErrInvalid.
func (r Request) Check(now time.Time) error {
	var errs []error
	if err := tenant.Validate(r.Tenant); err != nil {
		errs = append(errs, fmt.Errorf("%w: tenant: %w", ErrInvalid, err))
	}
	if err := CheckReason(r.Reason); err != nil {
		errs = append(errs, fmt.Errorf("%w: reason (--reason): %w", ErrInvalid, err))
	}
	switch {
	case !r.Until.IsZero() && r.For != 0:
		errs = append(errs, fmt.Errorf("%w: give an end (until, --until) or a length (for, --for), not both", ErrInvalid))
	case r.For < 0:
		errs = append(errs, fmt.Errorf("%w: for (--for) must be positive, got %s", ErrInvalid, r.For))
	case !r.Until.IsZero() && !r.Until.After(now):
		errs = append(errs, fmt.Errorf("%w: until (--until) %s is not in the future", ErrInvalid, r.Until.UTC().Format(time.RFC3339)))
	}
	return errors.Join(errs...)
}

// Put pauses a tenant fleet-wide: every worker stops starting its jobs
// within a second, and its jobs wait off the consumer until Resume (or
// until r.Until). Pausing a paused tenant replaces its reason and end. The
// bucket is created when missing. An invalid r matches ErrInvalid.
func Put(ctx context.Context, o Options, r Request) (Pause, error) {
	now := o.now()
	if err := r.Check(now); err != nil {
		return Pause{}, err
	}
	if r.For > 0 {
		r.Until = now.Add(r.For)
	}
	kv, err := o.open(ctx, true)
	if err != nil {
		return Pause{}, err
	}
	v := Value{Reason: r.Reason, Since: now.UTC(), Until: r.Until.UTC()}
	if r.Until.IsZero() {
		v.Until = time.Time{}
	}
	data, err := v.Encode()
	if err != nil {
		return Pause{}, err
	}
	key := TenantKey(r.Tenant)
	rev, err := kv.Put(ctx, key, data)
	if err != nil {
		return Pause{}, fmt.Errorf("writing %s: %w", key, err)
	}
	return Pause{Key: key, Tenant: r.Tenant, Reason: v.Reason, Since: v.Since, Until: v.Until, Revision: rev}, nil
}

// Resumed is what Resume did.
type Resumed struct {
	Tenant string `json:"tenant"`
	// Was is the pause that was lifted; nil when the tenant was not
	// paused.
	Was *Pause `json:"was,omitempty"`
	// Released counts the paused jobs brought back at once, each once.
	Released int `json:"released"`
}

// Resume lifts a tenant's pause: its jobs waiting off the consumer are
// brought back in their order in the jobs stream, to run at its limits,
// and then the workers start its new jobs again. The order matters: the
// paused jobs are released while the pause is still stored (the workers
// decide a released job, header.Released, and still park new
// ones), and the pause is deleted only Settle/2 later, when the workers
// have decided the released jobs, so that no job published meanwhile
// takes their place. Two more passes, Settle/10 and Settle after the
// delete, bring back the jobs parked until the workers applied it; any
// copy missed still comes back by itself within the workers'
// THROTTLER_PAUSE_RECHECK. A tenant not paused is not an error (Was is
// nil). A bad tenant matches ErrInvalid.
func Resume(ctx context.Context, o Options, t string) (Resumed, error) {
	if err := tenant.Validate(t); err != nil {
		return Resumed{}, fmt.Errorf("%w: tenant: %w", ErrInvalid, err)
	}
	res := Resumed{Tenant: t}
	kv, err := o.open(ctx, false)
	if err != nil || kv == nil {
		return res, err
	}
	p, err := get(ctx, kv, t)
	if err != nil {
		return res, err
	}
	res.Was = p
	settle := o.Settle
	if settle == 0 {
		settle = time.Second
	}
	seen := map[string]bool{}
	pass := func(wait time.Duration) error {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
		if o.Stream == "" || o.Schedules == "" {
			return nil
		}
		n, err := release.Waiting(ctx, o.JetStream, o.Stream, o.Schedules, t, header.WaitPaused, o.now(), seen)
		res.Released += n
		return err
	}
	if p != nil {
		if err := pass(0); err != nil {
			return res, err
		}
		select {
		case <-time.After(settle / 2):
		case <-ctx.Done():
			return res, ctx.Err()
		}
		if err := kv.Delete(ctx, TenantKey(t)); err != nil {
			return res, fmt.Errorf("deleting %s: %w", TenantKey(t), err)
		}
	}
	for _, wait := range []time.Duration{settle / 10, settle} {
		if err := pass(wait); err != nil {
			return res, err
		}
	}
	return res, nil
}

// End ends pause p, whose Until has come, as Resume would, bringing its
// jobs back in their order: it deletes p's key only if the bucket still
// holds p's revision, so that of every worker that tries at Until one
// ends it, and a pause written again since is left alone. It reports
// whether this call ended it. Jobs published since Until may run before
// the paused ones (a resume keeps the pause until they are back). The
// copies come back by themselves 2 s after Until (the worker's grace)
// when no worker ends it.
func End(ctx context.Context, o Options, p Pause) (Resumed, bool, error) {
	res := Resumed{Tenant: p.Tenant, Was: &p}
	kv, err := o.open(ctx, false)
	if err != nil || kv == nil {
		return res, false, err
	}
	if err := kv.Delete(ctx, p.Key, jetstream.LastRevision(p.Revision)); err != nil {
		if isWrongRevision(err) {
			return res, false, nil // another worker ended it, or it was written again
		}
		return res, false, fmt.Errorf("deleting %s: %w", p.Key, err)
	}
	if o.Stream == "" || o.Schedules == "" {
		return res, true, nil
	}
	settle := o.Settle
	if settle == 0 {
		settle = time.Second
	}
	seen := map[string]bool{}
	for _, wait := range []time.Duration{0, settle / 10, settle} {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return res, true, ctx.Err()
		}
		n, err := release.Waiting(ctx, o.JetStream, o.Stream, o.Schedules, p.Tenant, header.WaitPaused, o.now(), seen)
		res.Released += n
		if err != nil {
			return res, true, err
		}
	}
	return res, true, nil
}

// isWrongRevision reports whether err refused a delete because the key's
// last revision was another.
func isWrongRevision(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// Get returns tenant t's pause, or nil when it has none (an ended pause
// still in the bucket is returned: see Pause.Active).
func Get(ctx context.Context, o Options, t string) (*Pause, error) {
	if err := tenant.Validate(t); err != nil {
		return nil, fmt.Errorf("%w: tenant: %w", ErrInvalid, err)
	}
	kv, err := o.open(ctx, false)
	if err != nil || kv == nil {
		return nil, err
	}
	return get(ctx, kv, t)
}

// List returns every tenant's pause, by tenant.
func List(ctx context.Context, o Options) ([]Pause, error) {
	kv, err := o.open(ctx, false)
	if err != nil || kv == nil {
		return nil, err
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the pause bucket: %w", err)
	}
	var out []Pause
	for key := range lister.Keys() {
		t, ok := TenantOf(key)
		if !ok {
			continue
		}
		p, err := get(ctx, kv, t)
		if err != nil {
			return nil, err
		}
		if p != nil {
			out = append(out, *p)
		}
	}
	slices.SortFunc(out, func(a, b Pause) int {
		if a.Tenant < b.Tenant {
			return -1
		}
		if a.Tenant > b.Tenant {
			return 1
		}
		return 0
	})
	return out, nil
}

// get reads tenant t's key; nil when absent.
func get(ctx context.Context, kv jetstream.KeyValue, t string) (*Pause, error) {
	key := TenantKey(t)
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", key, err)
	}
	v, err := Decode(e.Value())
	if err != nil {
		// The workers hold such a tenant paused: say so.
		v = Value{Since: e.Created(), Reason: "unreadable pause value"}
	}
	return &Pause{Key: key, Tenant: t, Reason: v.Reason, Since: v.Since, Until: v.Until, Revision: e.Revision()}, nil
}

// open opens the bucket; create makes it when missing, with the jobs
// stream's replicas. Without create a missing bucket is nil: no pause.
func (o Options) open(ctx context.Context, create bool) (jetstream.KeyValue, error) {
	if o.JetStream == nil || o.Bucket == "" {
		return nil, errors.New("pause: Options need JetStream and Bucket")
	}
	if !create {
		kv, err := o.JetStream.KeyValue(ctx, o.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("opening the pause bucket %s: %w", o.Bucket, err)
		}
		return kv, nil
	}
	replicas := 1
	if o.Stream != "" {
		if s, err := o.JetStream.Stream(ctx, o.Stream); err == nil {
			replicas = s.CachedInfo().Config.Replicas
		}
	}
	return OpenBucket(ctx, o.JetStream, o.Bucket, replicas)
}

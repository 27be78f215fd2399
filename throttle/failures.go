package throttle

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// FailureCounter counts handler failures per job in Redis, apart from
// throttle deferrals, so that every worker of a fleet sees the same count.
// It is safe for concurrent use. (Failures.Failed counts the same failures
// and also gives up the job's owner record.)
type FailureCounter struct {
	lib  *library
	keys keyspace
	ttl  any // in ms, as the function reads it
}

// NewFailureCounter returns a counter whose entries expire ttl after a job's
// last failure. prefix defaults to DefaultPrefix. It loads the engine's
// functions into Redis on its first call if they are missing.
func NewFailureCounter(rdb Client, prefix string, ttl time.Duration) (*FailureCounter, error) {
	if rdb == nil {
		return nil, errors.New("throttle: nil redis client")
	}
	if ttl < time.Millisecond || ttl > MaxHorizon {
		return nil, fmt.Errorf("throttle: failure TTL %s out of range [1ms, %s]", ttl, MaxHorizon)
	}
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return &FailureCounter{lib: newLibrary(rdb), keys: keyspace{prefix: prefix}, ttl: strconv.FormatInt(ttl.Milliseconds(), 10)}, nil
}

// Incr records one more failure of the tenant's job and returns how many
// have been recorded, this one included.
func (f *FailureCounter) Incr(ctx context.Context, tenant, jobID string) (int64, error) {
	tag, err := jobTag(f.keys, tenant, jobID)
	if err != nil {
		return 0, err
	}
	n, _, err := countFailure(ctx, f.lib, []string{f.keys.failures(tag, jobID)}, f.ttl)
	return n, err
}

// Failures counts handler failures of the jobs a Decider decides, as
// FailureCounter does, and gives up the owner record of the incarnation
// that failed, so that the job's next incarnation may run. It is safe for
// concurrent use.
type Failures struct {
	l   *Limiter
	ttl any // the failure counter's TTL in ms, as the function reads it
}

// NewFailures returns the Failures of l's jobs. ttl is how long a job's
// failure count lives after its last failure, in [1ms, 30 days].
func NewFailures(l *Limiter, ttl time.Duration) (*Failures, error) {
	if l == nil {
		return nil, errors.New("throttle: nil limiter")
	}
	if ttl < time.Millisecond || ttl > MaxHorizon {
		return nil, fmt.Errorf("throttle: failure TTL %s out of range [1ms, %s]", ttl, MaxHorizon)
	}
	return &Failures{l: l, ttl: strconv.FormatInt(ttl.Milliseconds(), 10)}, nil
}

// Failed records one more handler failure of the tenant's job and returns
// how many have been recorded, this one included. While the count stays
// below giveUpAt it also gives up the job's owner record if that names
// incarnation, the incarnation that failed, in the same atomic call: it did
// not run to success, so the job's next incarnation, a moved copy included,
// must be free to run. At giveUpAt the record is kept, as the job is given
// up. It reports whether the record was released.
func (f *Failures) Failed(ctx context.Context, tenant, jobID string, incarnation, giveUpAt int64) (n int64, released bool, err error) {
	if err := validIncarnation(incarnation); err != nil {
		return 0, false, err
	}
	if giveUpAt < 1 || giveUpAt > 1_000_000 {
		return 0, false, &InvalidError{Code: CodeGiveUp, Detail: fmt.Sprintf("give-up count %d outside [1, 10^6]", giveUpAt)}
	}
	tag, err := jobTag(f.l.keys, tenant, jobID)
	if err != nil {
		return 0, false, err
	}
	keys := []string{f.l.keys.failures(tag, jobID), f.l.keys.owner(tag, jobID)}
	return countFailure(ctx, f.l.lib, keys, f.ttl, strconv.FormatInt(incarnation, 10), strconv.FormatInt(giveUpAt, 10))
}

// countFailure calls the library's failed function: keys are the failure
// counter and, optionally, the owner key; args the TTL and, with the owner
// key, the incarnation and the give-up count.
func countFailure(ctx context.Context, lib *library, keys []string, args ...any) (int64, bool, error) {
	v, err := lib.call(ctx, lib.failed, keys, args...)
	if err != nil {
		return 0, false, err
	}
	switch v[0] {
	case statusAdmitted:
		return v[1], v[2] == 1, nil
	case statusInvalid:
		return 0, false, &InvalidError{Code: Code(v[1]), Index: int(v[2])}
	case statusWrongType:
		key := "?"
		if v[1] >= 1 && int(v[1]) <= len(keys) {
			key = keys[v[1]-1]
		}
		return 0, false, &RedisError{Op: "FCALL " + lib.failed, Err: fmt.Errorf("WRONGTYPE key %s holds another type than a string", key)}
	}
	return 0, false, &RedisError{Op: "FCALL " + lib.failed, Err: fmt.Errorf("unexpected reply %v", v)}
}

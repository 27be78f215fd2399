package throttle

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/lua"
)

// FailureCounter counts handler failures per job in Redis, apart from
// throttle deferrals, so that every worker of a fleet sees the same count.
// It is safe for concurrent use.
type FailureCounter struct {
	rdb    Client
	script *redis.Script
	keys   keyspace
	ttl    time.Duration
}

// NewFailureCounter returns a counter whose entries expire ttl after a job's
// last failure. prefix defaults to DefaultPrefix.
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
	return &FailureCounter{rdb: rdb, script: redis.NewScript(lua.Failures), keys: keyspace{prefix: prefix}, ttl: ttl}, nil
}

// Incr records one more failure of the tenant's job and returns how many
// have been recorded, this one included.
func (f *FailureCounter) Incr(ctx context.Context, tenant, jobID string) (int64, error) {
	n, _, err := f.run(ctx, tenant, jobID, nil)
	return n, err
}

// IncrReleasing records one more failure of the tenant's job, like Incr,
// and while the count stays below giveUpAt it gives up the job's owner
// record (see Request.TrackOwner) if that record names incarnation, the
// incarnation that failed: it did not run to success, so the job's next
// incarnation, a moved copy included, must be free to run. At giveUpAt the
// record is kept, as the job is given up. It reports whether the record was
// released.
func (f *FailureCounter) IncrReleasing(ctx context.Context, tenant, jobID string, incarnation, giveUpAt int64) (n int64, released bool, err error) {
	if incarnation < 0 || incarnation >= 1<<53 {
		return 0, false, &InvalidError{Code: CodeIncarnation, Detail: fmt.Sprintf("incarnation %d outside [0, 2^53)", incarnation)}
	}
	if giveUpAt < 1 || giveUpAt > 1_000_000 {
		return 0, false, &InvalidError{Code: CodeGiveUp, Detail: fmt.Sprintf("give-up count %d outside [1, 10^6]", giveUpAt)}
	}
	return f.run(ctx, tenant, jobID, []any{strconv.FormatInt(incarnation, 10), strconv.FormatInt(giveUpAt, 10)})
}

// run calls the script; owner, when not nil, holds the incarnation and
// give-up count that ask it to release the owner record.
func (f *FailureCounter) run(ctx context.Context, tenant, jobID string, owner []any) (int64, bool, error) {
	tag, err := f.keys.tag(tenant)
	if err != nil {
		return 0, false, err
	}
	if jobID == "" {
		return 0, false, &InvalidError{Code: CodeJobID, Detail: "empty job id"}
	}
	if err := validJobID(jobID); err != nil {
		return 0, false, err
	}
	keys := []string{f.keys.failures(tag, jobID)}
	args := []any{strconv.FormatInt(f.ttl.Milliseconds(), 10)}
	if owner != nil {
		keys = append(keys, f.keys.owner(tag, jobID))
		args = append(args, owner...)
	}
	v, err := f.script.Run(ctx, f.rdb, keys, args...).Result()
	if err != nil {
		return 0, false, &RedisError{Op: "failure counter", Err: err}
	}
	arr, ok := v.([]any)
	if !ok || len(arr) < 3 {
		return 0, false, &RedisError{Op: "failure counter", Err: fmt.Errorf("unexpected reply %#v", v)}
	}
	status, ok1 := arr[0].(int64)
	n, ok2 := arr[1].(int64)
	rel, ok3 := arr[2].(int64)
	if !ok1 || !ok2 || !ok3 {
		return 0, false, &RedisError{Op: "failure counter", Err: fmt.Errorf("unexpected reply %#v", v)}
	}
	if status != statusAllowed {
		return 0, false, &InvalidError{Code: CodeState, Detail: fmt.Sprintf("failure counter refused input (code %d)", n)}
	}
	return n, rel == 1, nil
}

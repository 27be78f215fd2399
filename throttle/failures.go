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
	tag, err := f.keys.tag(tenant)
	if err != nil {
		return 0, err
	}
	if jobID == "" {
		return 0, &InvalidError{Code: CodeJobID, Detail: "empty job id"}
	}
	if err := validJobID(jobID); err != nil {
		return 0, err
	}
	key := f.keys.failures(tag, jobID)
	v, err := f.script.Run(ctx, f.rdb, []string{key}, strconv.FormatInt(f.ttl.Milliseconds(), 10)).Result()
	if err != nil {
		return 0, &RedisError{Op: "failure counter", Err: err}
	}
	arr, ok := v.([]any)
	if !ok || len(arr) < 2 {
		return 0, &RedisError{Op: "failure counter", Err: fmt.Errorf("unexpected reply %#v", v)}
	}
	status, ok1 := arr[0].(int64)
	n, ok2 := arr[1].(int64)
	if !ok1 || !ok2 {
		return 0, &RedisError{Op: "failure counter", Err: fmt.Errorf("unexpected reply %#v", v)}
	}
	if status != statusAllowed {
		return 0, &InvalidError{Code: CodeState, Detail: fmt.Sprintf("failure counter refused input (code %d)", n)}
	}
	return n, nil
}

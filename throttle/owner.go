package throttle

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// ClaimOwner makes incarnation the owner of the tenant's job (see
// Request.TrackOwner) if no incarnation owns it yet, for as long as a
// decision would keep the record (the horizon plus the tenant's longest
// fill time). It reports whether it did, and the owner after the call (-1
// for none). Every other incarnation of the job is then a Duplicate until
// the record is given up or expires.
func (l *Limiter) ClaimOwner(ctx context.Context, tenant, jobID string, incarnation int64) (claimed bool, owner int64, err error) {
	ttl := l.horizon + l.rules.For(tenant).longestFill()
	return l.runOwner(ctx, tenant, jobID, incarnation, "1", strconv.FormatInt(max(1, ttl.Milliseconds()), 10))
}

// ReleaseOwner deletes the owner record of the tenant's job if it names
// incarnation, and reports whether it did.
func (l *Limiter) ReleaseOwner(ctx context.Context, tenant, jobID string, incarnation int64) (bool, error) {
	released, _, err := l.runOwner(ctx, tenant, jobID, incarnation, "0")
	return released, err
}

// runOwner calls lua/owner.lua with op and, for a claim, the TTL.
func (l *Limiter) runOwner(ctx context.Context, tenant, jobID string, incarnation int64, op string, ttl ...any) (bool, int64, error) {
	tag, err := l.keys.tag(tenant)
	if err != nil {
		return false, 0, err
	}
	if jobID == "" {
		return false, 0, &InvalidError{Code: CodeJobID, Detail: "empty job id"}
	}
	if err := validJobID(jobID); err != nil {
		return false, 0, err
	}
	if incarnation < 0 || incarnation >= 1<<53 {
		return false, 0, &InvalidError{Code: CodeIncarnation, Detail: fmt.Sprintf("incarnation %d outside [0, 2^53)", incarnation)}
	}
	args := append([]any{op, strconv.FormatInt(incarnation, 10)}, ttl...)
	v, err := l.ownerScript.Run(ctx, l.rdb, []string{l.keys.owner(tag, jobID)}, args...).Result()
	if err != nil {
		return false, 0, &RedisError{Op: "owner script", Err: err}
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 3 {
		return false, 0, &RedisError{Op: "owner script", Err: fmt.Errorf("unexpected reply %#v", v)}
	}
	status, ok1 := arr[0].(int64)
	done, ok2 := arr[1].(int64)
	owner, ok3 := arr[2].(int64)
	if !ok1 || !ok2 || !ok3 {
		return false, 0, &RedisError{Op: "owner script", Err: fmt.Errorf("unexpected reply %#v", v)}
	}
	if status != statusAllowed {
		return false, 0, &InvalidError{Code: CodeState, Detail: fmt.Sprintf("owner script refused input (code %d)", done)}
	}
	return done == 1, owner, nil
}

// longestFill is the longest time any of the limits takes to refill from
// empty, rounded up to the microsecond.
func (ls Limits) longestFill() time.Duration {
	var longest int64
	for _, lim := range ls {
		// burst*period < 2^53 µs (Limit.Validate), so this cannot overflow.
		fill := (lim.Burst*lim.periodMicros() + lim.Rate - 1) / lim.Rate
		longest = max(longest, fill)
	}
	return time.Duration(longest) * time.Microsecond
}

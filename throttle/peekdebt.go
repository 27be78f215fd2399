package throttle

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// SettleDebt is what the debts settled on a tenant's jobs (Limiter.Settle:
// jobs that reported more than they were charged) left behind: how much
// later they make its reserved jobs run. The debt itself is in the
// buckets: below 0 tokens, their empty time ahead (Bucket.Tokens,
// Bucket.ReservedUntil).
type SettleDebt struct {
	// Shift is the tenant's shift: the sum of what its debts moved the
	// slots reserved before them, for as long as its key lives (the
	// horizon, the longest fill time and 5 minutes after the last debt,
	// at least as long as a reservation that recorded it).
	Shift time.Duration `json:"shift"`
	// Pending counts the tenant's reserved jobs that a debt settled after
	// their slot was reserved has still to move: when each comes back, it
	// runs later than its slot by the shift less the one it recorded.
	Pending int `json:"pending"`
	// Later is the most of them: how much later than its slot the most
	// moved of the Pending jobs runs. 0 when Pending is.
	Later time.Duration `json:"later"`
}

// peekDebt reads the tenant's shift key (SHIFT, lua/head.lua) and, when
// it holds one above 0, the reservations of tag, as decide would read
// them (lua/rules.lua: shiftRead, reserved): nil when the tenant has no
// shift.
func peekDebt(ctx context.Context, node redis.Cmdable, k keyspace, tag string) (*SettleDebt, error) {
	key := k.shift(tag)
	v, err := node.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, &RedisError{Op: "GET " + key, Err: err}
	}
	sh, err := strconv.ParseInt(v, 10, 64)
	if err != nil || sh < 0 || len(v) > 16 {
		return nil, &InvalidError{Code: CodeShift, Detail: fmt.Sprintf("%s holds %q", key, v)}
	}
	if sh == 0 {
		return nil, nil
	}
	out := &SettleDebt{Shift: time.Duration(sh) * time.Microsecond}
	var names []string
	if err := scan(ctx, node, k.reservation(tag, "*"), func(n string) error { names = append(names, n); return nil }); err != nil {
		return nil, err
	}
	for len(names) > 0 {
		chunk := names[:min(len(names), 500)]
		names = names[len(chunk):]
		vals, err := node.MGet(ctx, chunk...).Result()
		if err != nil {
			return nil, &RedisError{Op: "MGET " + chunk[0] + " …", Err: err}
		}
		for i, rv := range vals {
			s, ok := rv.(string)
			if !ok {
				continue // expired since the scan
			}
			d, ok := recordedShift(s)
			if !ok {
				return nil, &InvalidError{Code: CodeReservation, Detail: fmt.Sprintf("%s holds %q", chunk[i], s)}
			}
			if d < 0 || d >= sh {
				continue // stale (decided again when it comes back), or moved already
			}
			out.Pending++
			out.Later = max(out.Later, time.Duration(sh-d)*time.Microsecond)
		}
	}
	return out, nil
}

// recordedShift reads the shift a reservation recorded,
// '<slot µs>:<regime id>[:<shift µs>]': 0 without one, -1 for a slot
// stored without a regime (stale: decided again, never moved); ok false
// when malformed.
func recordedShift(v string) (d int64, ok bool) {
	fields := strings.Split(v, ":")
	for _, f := range fields {
		if f == "" || strings.Trim(f, "0123456789") != "" || len(f) > 16 {
			return 0, false
		}
	}
	switch len(fields) {
	case 1:
		return -1, true
	case 2:
		return 0, true
	case 3:
		d, err := strconv.ParseInt(fields[2], 10, 64)
		return d, err == nil
	}
	return 0, false
}

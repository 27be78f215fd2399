package throttle

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// peekCalendar reads the calendar window of lim at key at now, as the
// function would (lua/calendar.lua: calRead, calPlace): the count of the
// window holding now, when that window ends, the last window holding a
// count, and the wait of a job of cost 1, placed in the first window
// passed, from now's, that starts no earlier than the last holding a
// count and has room; or, when none has, the wait until the last
// window's start (for a window that dead-letters the jobs over it, only
// now's window is looked at, and the wait is until it ends).
func (l *Limiter) peekCalendar(ctx context.Context, node redis.Cmdable, key string, lim Limit, now time.Time) (Bucket, error) {
	b := Bucket{Limit: lim, Key: key, Tokens: float64(lim.Rate), FullAt: now}
	starts := calendarStarts(lim.Unit, l.zone(lim), now, l.horizon)
	ci := calendarCurrent(starts, now)
	cur := starts[ci]
	b.WindowStart, b.ResetsAt = cur, starts[ci+1]
	v, err := node.HGetAll(ctx, key).Result()
	if err != nil {
		return b, &RedisError{Op: "HGETALL " + key, Err: err}
	}
	counts := make(map[int64]int64, len(v))
	floor := int64(-1)
	for f, n := range v {
		s, err1 := strconv.ParseInt(f, 10, 64)
		c, err2 := strconv.ParseInt(n, 10, 64)
		if err1 != nil || err2 != nil || s < 0 || c < 0 {
			return b, &InvalidError{Code: CodeState, Detail: fmt.Sprintf("%s holds %q: %q, not a count by window start", key, f, n)}
		}
		counts[s] = c
		if c > 0 && s > floor {
			floor = s
		}
	}
	b.Stored = len(v) > 0
	b.InWindow = counts[cur.UnixMicro()]
	b.Tokens = float64(lim.Rate - b.InWindow)
	if floor >= 0 {
		// Full again when the last window holding a count ends.
		for i := range len(starts) - 1 {
			if starts[i].UnixMicro() == floor {
				b.FullAt = starts[i+1]
			}
		}
		if floor > now.UnixMicro() {
			b.ReservedUntil = time.UnixMicro(floor)
		}
	}
	at := now.UnixMicro()
	wait := starts[len(starts)-2].Sub(now) // no window passed has room
	if lim.DeadLetter {
		wait = b.ResetsAt.Sub(now) // only now's window: a job over it is refused until it ends
	}
	for i := ci; i < len(starts)-1; i++ {
		s := starts[i].UnixMicro()
		if s >= floor && counts[s]+1 <= lim.Rate {
			wait = time.Duration(max(0, s-at)) * time.Microsecond
			break
		}
		if lim.DeadLetter {
			break
		}
	}
	b.Wait = wait
	return b, nil
}

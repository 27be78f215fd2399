package throttle

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// QueuedJob names one job parked for its turn under a level above its
// tenant (Queued): the level (Level.String), its id and its cost.
type QueuedJob struct {
	Level string
	JobID string
	Cost  int64
}

// Unqueue takes jobs of tenant out of the levels' waiting lists, for jobs
// that will never come back: an operator purged their parked messages.
// It returns how many it took out; a job not waiting is no error (one
// already called holds a pass, which its waker, finding no message,
// hands on: Shared.Forfeit).
//
// Without it a purged backlog's places would still be called in their
// turns, each charged to the level and handed on only once its waker
// found no message: the other tenants under the level would get less for
// as long as the backlog took to call.
func (l *Limiter) Unqueue(ctx context.Context, tenant string, jobs []QueuedJob) (int, error) {
	if len(jobs) == 0 {
		return 0, nil
	}
	weight := max(l.policies.Policy(tenant).Weight, 1)
	byLevel := map[Level][]any{}
	var order []Level
	for _, j := range jobs {
		lv, ok := ParseLevel(j.Level)
		if !ok {
			return 0, &InvalidError{Code: CodeTenant, Detail: fmt.Sprintf("%q names no level", j.Level)}
		}
		lj := LevelJob{Tenant: tenant, JobID: j.JobID, Flow: tenant, Cost: max(j.Cost, 1), Weight: weight}
		if err := lj.validate(); err != nil {
			return 0, err
		}
		if _, seen := byLevel[lv]; !seen {
			order = append(order, lv)
		}
		byLevel[lv] = append(byLevel[lv], lj.member(), strconv.FormatInt(weight, 10))
	}
	var calls []fcall
	for _, lv := range order {
		lk := l.keys.levels().of(lv)
		args := byLevel[lv]
		for len(args) > 0 {
			n := min(len(args), 2*maxJobsPerCall)
			calls = append(calls, fcall{fn: l.lib.unqueue, keys: []string{lk.list, lk.fair, lk.groups}, args: args[:n]})
			args = args[n:]
		}
	}
	l.lib.run(ctx, calls)
	total := 0
	var errs []error
	for _, c := range calls {
		if err := c.cmd.Err(); err != nil {
			errs = append(errs, err)
			continue
		}
		switch v := c.cmd.Val().(type) {
		case int64:
			total += int(v)
		case []any:
			if refused := refusal(c, v); refused != nil {
				errs = append(errs, refused)
			}
		}
	}
	if len(errs) > 0 {
		return total, &RedisError{Op: "taking purged jobs out of the levels' waiting lists", Err: errors.Join(errs...)}
	}
	return total, nil
}

package consumer

import (
	"sync"
	"time"
)

// runTimes keeps, per running cap ("" for the fleet's), a moving mean of
// how long the jobs this worker ran under it held their leases, to foretell
// a parked job's wait. Safe for concurrent use; the zero value is ready.
type runTimes struct {
	mu sync.Mutex
	m  map[string]time.Duration
}

// maxRunTimes caps the caps remembered: past it, new ones are not.
const maxRunTimes = 100_000

// add folds one run into capKey's mean: each run weighs a fifth.
func (r *runTimes) add(capKey string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]time.Duration{}
	}
	old, ok := r.m[capKey]
	switch {
	case ok:
		r.m[capKey] = old + (d-old)/5
	case len(r.m) < maxRunTimes:
		r.m[capKey] = d
	}
}

// mean returns capKey's mean run time, if a run was seen.
func (r *runTimes) mean(capKey string) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, ok := r.m[capKey]
	return d, ok
}

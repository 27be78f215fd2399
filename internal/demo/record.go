package demo

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/throttler/throttler/consumer"
)

// recorder keeps what was published and what the demo handler saw, per
// tenant. It is safe for concurrent use.
type recorder struct {
	mu      sync.Mutex
	tenants map[string]*record
}

// record is what happened to one tenant's jobs.
type record struct {
	published     int64
	publishErrors int64
	firstPublish  time.Time
	lastPublish   time.Time

	admitted     map[string]bool // job IDs the handler ran
	duplicates   int64           // handler runs of a job already run
	admits       []time.Time     // when each job was first run
	waits        []time.Duration // publish → handler, per job
	redeliveries int64           // deliveries before the admitted one, summed
}

// view is a snapshot of one tenant's record.
type view struct {
	published     int64
	publishErrors int64
	firstPublish  time.Time
	lastPublish   time.Time
	admitted      int64
	duplicates    int64
	lastAdmit     time.Time
	recent        int64 // admissions within the window asked for
	redeliveries  int64
	p50, p99      time.Duration
}

func newRecorder() *recorder { return &recorder{tenants: map[string]*record{}} }

// get returns tenant's record, creating it; r.mu must be held.
func (r *recorder) get(tenant string) *record {
	rec, ok := r.tenants[tenant]
	if !ok {
		rec = &record{admitted: map[string]bool{}}
		r.tenants[tenant] = rec
	}
	return rec
}

// published records that a job of tenant, published at at, was stored.
func (r *recorder) published(tenant string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.get(tenant)
	if rec.published == 0 {
		rec.firstPublish = at
	}
	rec.published++
	rec.lastPublish = at
}

// publishFailed records that a publish of tenant failed.
func (r *recorder) publishFailed(tenant string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.get(tenant).publishErrors++
}

// handle is the demo's consumer.Handler: it records the admission and
// returns at once, standing in for the user's work.
func (r *recorder) handle(_ context.Context, job consumer.Job) error {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.get(job.Tenant)
	if rec.admitted[job.ID] {
		rec.duplicates++
		return nil
	}
	rec.admitted[job.ID] = true
	rec.admits = append(rec.admits, now)
	rec.waits = append(rec.waits, now.Sub(job.Published))
	rec.redeliveries += int64(job.Delivered) - 1
	return nil
}

// view returns a snapshot of tenant's record, counting the admissions in
// the window before now.
func (r *recorder) view(tenant string, now time.Time, window time.Duration) view {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.get(tenant)
	v := view{
		published:     rec.published,
		publishErrors: rec.publishErrors,
		firstPublish:  rec.firstPublish,
		lastPublish:   rec.lastPublish,
		admitted:      int64(len(rec.admits)),
		duplicates:    rec.duplicates,
		redeliveries:  rec.redeliveries,
	}
	for _, at := range rec.admits {
		if at.After(v.lastAdmit) {
			v.lastAdmit = at
		}
		if now.Sub(at) < window {
			v.recent++
		}
	}
	waits := slices.Clone(rec.waits)
	slices.Sort(waits)
	v.p50 = Percentile(waits, 0.50)
	v.p99 = Percentile(waits, 0.99)
	return v
}

// Percentile returns the nearest-rank p-th percentile of sorted (the
// ceil(p*n)-th smallest of n), or 0 when it is empty.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

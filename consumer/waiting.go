package consumer

import (
	"math"
	"strings"
	"sync"
	"time"

	"github.com/throttler/throttler/header"
	tenantpkg "github.com/throttler/throttler/tenant"
	"github.com/throttler/throttler/top"
)

// waitKind is how a job waits.
type waitKind int8

const (
	// waitNaked jobs wait on the consumer, NAK'd with a delay.
	waitNaked waitKind = iota
	// waitMoved jobs wait off the consumer for a limit's slot.
	waitMoved
	// waitParked jobs wait off the consumer for a lease of a running cap.
	waitParked
	// waitPaused jobs wait off the consumer because their tenant is paused.
	waitPaused
	waitKinds
)

// rateSeconds is the window admitted and deferred rates are averaged over.
const rateSeconds = 5

// dlSlots and dlSlot make the hour over which dead letters are counted.
const (
	dlSlots = 12
	dlSlot  = 5 * time.Minute
)

// tenantWaits is what the waiting tracker knows of one tenant.
type tenantWaits struct {
	tenant  string // "" for a free record
	buckets [maxBuckets]waitBucket
	nb      int
	// admitted and deferred count per second over the last rateSeconds
	// seconds up to rateBase (a ring by second).
	admitted, deferred [rateSeconds + 1]int32
	rateBase           int64
	// dead counts dead letters per dlSlot over the last hour, up to
	// deadBase (a ring by slot); nil until the first.
	dead     *[dlSlots]int32
	deadBase int64
	// binding is why its last deferred job waited.
	binding string
}

// waiting keeps, per tenant, the jobs this worker sent to wait and when
// each comes back, its rates and its dead letters: what `throttler top`
// asks every worker for (TopRows). A job sent to wait counts until it is
// due back (a moved job: until its copy fires), to the millisecond, so a
// worker that dies takes its counts with it and a count never drifts for
// longer than the longest wait; a parked job woken early
// is taken off by the worker it comes back to (a negative count, due when
// the parked one was). It counts at most maxTenants tenants, the others
// as OtherTenants. The records are one slice, so an answer reads them in
// one pass. Safe for concurrent use.
type waiting struct {
	maxTenants int

	mu    sync.Mutex
	index map[string]int32 // tenant → its record in recs
	recs  []tenantWaits
	free  []int32 // records of forgotten tenants, to reuse
}

// newWaiting returns a tracker of at most maxTenants tenants.
func newWaiting(maxTenants int) *waiting {
	return &waiting{maxTenants: maxTenants, index: map[string]int32{}}
}

// get returns tenant's record (tenant.Invalid's for a job without a
// valid tenant, as Stats and the dead-letter subject name it: "" marks a
// free record); w.mu is held.
func (w *waiting) get(tenant string) *tenantWaits {
	if tenant == "" {
		tenant = tenantpkg.Invalid
	}
	i, ok := w.index[tenant]
	if !ok && len(w.index) >= w.maxTenants {
		tenant = OtherTenants
		i, ok = w.index[tenant]
	}
	if !ok {
		if n := len(w.free); n > 0 {
			i, w.free = w.free[n-1], w.free[:n-1]
		} else {
			w.recs = append(w.recs, tenantWaits{})
			i = int32(len(w.recs) - 1)
		}
		w.recs[i] = tenantWaits{tenant: tenant}
		w.index[tenant] = i
	}
	return &w.recs[i]
}

// kindOf is how the deferral d waits, once the Deferrer settled it.
func kindOf(d Deferral) waitKind {
	switch {
	case d.Paused:
		return waitPaused
	case d.Park:
		return waitParked
	case d.Moved:
		return waitMoved
	}
	return waitNaked
}

// deferred records a deferral settled at now.
func (w *waiting) deferred(d Deferral, now time.Time) {
	if d.Err != nil {
		return // unsettled: back after AckWait, uncounted
	}
	pub := d.Job.Published.UnixMicro()
	if d.Job.Published.IsZero() {
		pub = now.UnixMicro()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	tw := w.get(d.Job.Tenant)
	tw.count(&tw.deferred, now.Unix())
	if tw.binding != d.Reason {
		tw.binding = d.Reason
	}
	kind := kindOf(d)
	due := now.Add(d.Wait)
	if kind == waitMoved && !d.FiresAt.IsZero() {
		// A moved job is in the stream until its copy fires, before its
		// slot: from then on it is the worker's that holds it, or it is
		// decided (and perhaps moved) again. Counting it to its slot
		// would count it twice if moved again.
		due = d.FiresAt
	}
	ms := due.UnixMilli()
	tw.add(waitBucket{from: ms, due: ms, kind: kind, n: 1, oldest: pub, newest: pub}, now.UnixMilli())
}

// arrived records a job delivered at now: a parked job woken before its
// fallback time takes itself off the count of the worker that parked it.
func (w *waiting) arrived(job Job, now time.Time) {
	reason := job.Header.Get(header.WaitReason)
	if job.Header.Get(header.Woken) == "" || strings.HasPrefix(reason, header.WaitPaused) {
		return // a released paused job was dropped when its pause lifted
	}
	if strings.HasPrefix(reason, header.WaitLimit) || reason == header.WaitSlot {
		// A moved job brought back after its limits changed: it was
		// counted moved, not parked, until its copy was due to fire.
		return
	}
	until, err := time.Parse(time.RFC3339Nano, job.Header.Get(header.WaitUntil))
	if err != nil || !until.After(now) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	ms := until.UnixMilli()
	tw := w.get(job.Tenant)
	if tw.unpark(ms, now.UnixMilli()) {
		return
	}
	tw.add(waitBucket{from: ms, due: ms, kind: waitParked, n: -1, oldest: 1<<63 - 1}, now.UnixMilli())
}

// unparkSlack is how far (ms) a woken job's fallback time, read from its
// copy, may lie outside the run of parked jobs that counted it: the two
// are read from the clock a moment apart.
const unparkSlack = 1000

// unpark takes a parked job due back at due (Unix ms) off this worker's
// run that counts it, when this worker parked it, and reports whether it
// did. A negative run instead would expire on its own: once either run is
// merged with others, one outlives the other and the count is off (jobs
// shown parked after they ran) until the later is due.
func (tw *tenantWaits) unpark(due, now int64) bool {
	for i := range tw.nb {
		b := &tw.buckets[i]
		if b.kind != waitParked || b.n <= 0 || b.due <= now || due < b.from-unparkSlack || due > b.due+unparkSlack {
			continue
		}
		*b = b.rebase(now)
		if b.n--; b.n < 0.5 {
			tw.nb--
			tw.buckets[i] = tw.buckets[tw.nb]
		}
		return true
	}
	return false
}

// admitted records a job started at now.
func (w *waiting) admitted(tenant string, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	tw := w.get(tenant)
	tw.count(&tw.admitted, now.Unix())
}

// deadLettered records a dead letter at now.
func (w *waiting) deadLettered(tenant string, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	tw := w.get(tenant)
	slot := now.Unix() / int64(dlSlot/time.Second)
	if tw.dead == nil {
		tw.dead = &[dlSlots]int32{}
		tw.deadBase = slot
	}
	tw.rollDead(slot)
	tw.dead[slot%dlSlots]++
}

// rollDead moves the dead letters' ring on to slot, zeroing the slots
// passed.
func (tw *tenantWaits) rollDead(slot int64) {
	for s := tw.deadBase + 1; s <= slot && s <= tw.deadBase+dlSlots; s++ {
		tw.dead[s%dlSlots] = 0
	}
	tw.deadBase = max(tw.deadBase, slot)
}

// count adds one at second sec to a rate ring.
func (tw *tenantWaits) count(ring *[rateSeconds + 1]int32, sec int64) {
	tw.roll(sec)
	ring[sec%(rateSeconds+1)]++
}

// roll moves both rate rings on to second sec.
func (tw *tenantWaits) roll(sec int64) {
	if tw.rateBase == 0 {
		tw.rateBase = sec
		return
	}
	for s := tw.rateBase + 1; s <= sec && s <= tw.rateBase+rateSeconds+1; s++ {
		tw.admitted[s%(rateSeconds+1)] = 0
		tw.deferred[s%(rateSeconds+1)] = 0
	}
	tw.rateBase = max(tw.rateBase, sec)
}

// quiet reports whether the rate rings, rolled on to the present, hold
// no count: nothing was admitted or deferred in the rates' window, nor in
// the second under way (not in the rates yet). It reads the rings, not
// rateBase: every read of the rows rolls rateBase on to its second, so a
// tenant read more often than every rateSeconds would never look idle.
func (tw *tenantWaits) quiet() bool {
	return tw.admitted == [rateSeconds + 1]int32{} && tw.deferred == [rateSeconds + 1]int32{}
}

// rate is the mean per second of the last rateSeconds whole seconds
// before sec.
func rate(ring *[rateSeconds + 1]int32, sec int64) float64 {
	var n int32
	for s := sec - rateSeconds; s < sec; s++ {
		n += ring[s%(rateSeconds+1)]
	}
	return float64(n) / rateSeconds
}

// rows returns a row per tenant with anything to show at now (see visit).
func (w *waiting) rows(now time.Time, paused func(string) bool) []top.Row {
	var out []top.Row
	w.visit(now, paused, func(r *top.Row) { out = append(out, *r) })
	return out
}

// visitBatch is how many records visit reads under one hold of the lock:
// the worker's own counting waits for at most that many, not for all.
const visitBatch = 1024

// visit calls fn with a row per tenant with anything to show at now,
// forgetting tenants with nothing; paused says whether a tenant is paused
// still (its paused jobs are dropped once it is not: a resume released
// them). The row is fn's only for the call. The records are read
// visitBatch at a time, fn called outside the lock.
func (w *waiting) visit(now time.Time, paused func(string) bool, fn func(*top.Row)) {
	batch := make([]top.Row, 0, visitBatch)
	for from := 0; ; from += visitBatch {
		batch, more := w.visitFrom(from, now, paused, batch[:0])
		for i := range batch {
			fn(&batch[i])
		}
		if !more {
			return
		}
	}
}

// visitFrom appends to rows the rows of records [from, from+visitBatch),
// and reports whether records follow.
func (w *waiting) visitFrom(from int, now time.Time, paused func(string) bool, rows []top.Row) ([]top.Row, bool) {
	sec, ms := now.Unix(), now.UnixMilli()
	slot := now.Unix() / int64(dlSlot/time.Second)
	w.mu.Lock()
	defer w.mu.Unlock()
	var r top.Row
	end := min(from+visitBatch, len(w.recs))
	for i := from; i < end; i++ {
		tw := &w.recs[i]
		if tw.tenant == "" {
			continue
		}
		r = top.Row{Tenant: tw.tenant}
		oldest, unparked := int64(1<<63-1), int64(1<<63-1)
		live := 0
		stillPaused := -1           // unknown
		var whole [waitKinds]int64  // buckets all still away
		var part [waitKinds]float64 // buckets partly back
		partly := false
		for k := range tw.nb {
			b := tw.buckets[k]
			if b.due <= ms {
				continue
			}
			if b.kind == waitPaused {
				if stillPaused < 0 {
					stillPaused = 1
					if paused != nil && !paused(tw.tenant) {
						stillPaused = 0
					}
				}
				if stillPaused == 0 {
					continue
				}
			}
			tw.buckets[live] = b
			live++
			if ms < b.from {
				whole[b.kind] += int64(b.n)
			} else {
				part[b.kind] += b.at(ms)
				partly = true
			}
			bo := b.oldestAt(ms)
			if b.n > 0 {
				oldest = min(oldest, bo)
				if b.kind != waitParked {
					unparked = min(unparked, bo)
				}
			}
			if b.kind == waitParked {
				// Parked jobs come back woken to any worker: the fleet's
				// runs together say which still wait (top.Gather).
				run := top.ParkedRun{N: int64(math.Round(b.at(ms)))}
				if run.N > 0 {
					run.Wait = time.Duration(now.UnixMicro()-bo) * time.Microsecond
				}
				if r.Runs == nil {
					r.Runs = []top.ParkedRun{} // sent even if empty: the other jobs' wait is apart
				}
				if run.N != 0 {
					r.Runs = append(r.Runs, run)
				}
			}
		}
		if partly {
			for k := range whole {
				whole[k] += int64(math.Round(part[k]))
			}
		}
		r.Naked, r.Moved, r.Parked, r.Paused = whole[waitNaked], whole[waitMoved], whole[waitParked], whole[waitPaused]
		tw.nb = live
		tw.roll(sec)
		r.Admitted, r.Deferred = rate(&tw.admitted, sec), rate(&tw.deferred, sec)
		idle := tw.quiet() // nothing counted in the rates' window, this second included
		if tw.dead != nil {
			tw.rollDead(slot)
			for _, n := range tw.dead {
				r.DeadLetters += int64(n)
			}
		}
		if live == 0 && r.Admitted == 0 && r.Deferred == 0 && r.DeadLetters == 0 && idle {
			delete(w.index, tw.tenant) // nothing to show: forget it
			*tw = tenantWaits{}
			w.free = append(w.free, int32(i))
			continue
		}
		if oldest != 1<<63-1 && r.Waiting() > 0 {
			r.OldestWait = max(0, float64(now.UnixMicro()-oldest)/1e6)
		}
		if unparked != 1<<63-1 && r.Runs != nil {
			r.UnparkedWait = max(0, float64(now.UnixMicro()-unparked)/1e6)
		}
		if r.Waiting() > 0 || r.Deferred > 0 {
			r.Binding = tw.binding
		}
		rows = append(rows, r)
	}
	return rows, end < len(w.recs)
}

package consumer

import (
	"strings"
	"sync"
	"time"
)

// WaitKind is how a job waits.
type WaitKind int

const (
	// WaitNaked jobs wait on the consumer, NAK'd with a delay.
	WaitNaked WaitKind = iota
	// WaitMoved jobs wait off the consumer for a limit's slot.
	WaitMoved
	// WaitParked jobs wait off the consumer for a lease of a running cap.
	WaitParked
	// WaitPaused jobs wait off the consumer because their tenant is paused.
	WaitPaused
	waitKinds
)

// rateSeconds is the window admitted and deferred rates are averaged over.
const rateSeconds = 5

// dlSlots and dlSlot make the hour over which dead letters are counted.
const (
	dlSlots = 12
	dlSlot  = 5 * time.Minute
)

// waitBucket is the jobs of one kind this worker sent to wait until one
// second, n of them (negative: jobs sent by any worker that came back
// before then), the oldest first published at oldest (Unix µs).
type waitBucket struct {
	due    int64 // Unix seconds
	kind   WaitKind
	n      int32
	oldest int64
}

// tenantWaits is what the waiting tracker knows of one tenant.
type tenantWaits struct {
	buckets []waitBucket
	// admitted and deferred count per second over the last rateSeconds
	// seconds before rateBase (a ring by second).
	admitted, deferred [rateSeconds + 1]int32
	rateBase           int64
	// dead counts dead letters per dlSlot over the last hour, up to
	// deadBase (a ring by slot); nil until the first.
	dead     *[dlSlots]int32
	deadBase int64
	// heldBy is why its last deferred job waited.
	heldBy string
}

// waiting keeps, per tenant, the jobs this worker sent to wait and when
// each comes back, its rates and its dead letters: what `throttler top`
// asks every worker for (TopRows). A job sent to wait counts until it is
// due back, so a worker that dies takes its counts with it and a count
// never drifts for longer than the longest wait; a parked job woken early
// is taken off by the worker it comes back to (a negative count, due when
// the parked one was). It counts at most maxTenants tenants, the others
// as OtherTenants. Safe for concurrent use.
type waiting struct {
	maxTenants int

	mu      sync.Mutex
	tenants map[string]*tenantWaits
}

// newWaiting returns a tracker of at most maxTenants tenants.
func newWaiting(maxTenants int) *waiting {
	return &waiting{maxTenants: maxTenants, tenants: map[string]*tenantWaits{}}
}

// get returns tenant's record; w.mu is held.
func (w *waiting) get(tenant string) *tenantWaits {
	tw, ok := w.tenants[tenant]
	if !ok {
		if len(w.tenants) >= w.maxTenants {
			tenant = OtherTenants
			tw = w.tenants[tenant]
		}
		if tw == nil {
			tw = &tenantWaits{}
			w.tenants[tenant] = tw
		}
	}
	return tw
}

// kindOf is how the deferral d waits, once the Deferrer settled it.
func kindOf(d Deferral) WaitKind {
	switch {
	case d.Paused:
		return WaitPaused
	case d.Park:
		return WaitParked
	case d.Moved:
		return WaitMoved
	}
	return WaitNaked
}

// deferred records a deferral settled at now.
func (w *waiting) deferred(d Deferral, now time.Time) {
	if d.Err != nil {
		return // unsettled: back after AckWait, uncounted
	}
	kind := kindOf(d)
	due := now.Add(d.Wait).Unix() + 1
	pub := d.Job.Published.UnixMicro()
	if d.Job.Published.IsZero() {
		pub = now.UnixMicro()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	tw := w.get(d.Job.Tenant)
	tw.count(&tw.deferred, now.Unix())
	if tw.heldBy != d.Reason {
		tw.heldBy = d.Reason
	}
	tw.add(waitBucket{due: due, kind: kind, n: 1, oldest: pub})
}

// add merges b into the record's buckets.
func (tw *tenantWaits) add(b waitBucket) {
	for i := range tw.buckets {
		if c := &tw.buckets[i]; c.due == b.due && c.kind == b.kind && (c.n > 0) == (b.n > 0) {
			c.n += b.n
			c.oldest = min(c.oldest, b.oldest)
			return
		}
	}
	tw.buckets = append(tw.buckets, b)
}

// arrived records a job delivered at now: a parked job woken before its
// fallback time takes itself off the count of the worker that parked it.
func (w *waiting) arrived(job Job, now time.Time) {
	if job.Header.Get(HeaderWoken) == "" || strings.HasPrefix(job.Header.Get(HeaderWaitReason), PauseReason) {
		return // a released paused job was dropped when its pause lifted
	}
	until, err := time.Parse(time.RFC3339Nano, job.Header.Get(HeaderWaitUntil))
	if err != nil || !until.After(now) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.get(job.Tenant).add(waitBucket{due: until.Unix() + 1, kind: WaitParked, n: -1, oldest: 1<<63 - 1})
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

// rate is the mean per second of the last rateSeconds whole seconds
// before sec.
func rate(ring *[rateSeconds + 1]int32, sec int64) float64 {
	var n int32
	for s := sec - rateSeconds; s < sec; s++ {
		n += ring[s%(rateSeconds+1)]
	}
	return float64(n) / rateSeconds
}

// TopRow is one tenant's line of `throttler top`, as one worker knows it
// (the rows of every worker add up to the fleet's).
type TopRow struct {
	Tenant string `json:"tenant"`
	// Admitted and Deferred are jobs per second, over the last 5 s.
	Admitted float64 `json:"admitted_per_s"`
	Deferred float64 `json:"deferred_per_s"`
	// Waiting counts the jobs waiting, by how: NAK'd on the consumer,
	// moved off it for a slot, parked for a lease, paused.
	Naked  int64 `json:"nakd"`
	Moved  int64 `json:"moved"`
	Parked int64 `json:"parked"`
	Paused int64 `json:"paused"`
	// OldestWait is how long the oldest of them has waited since it was
	// first published, in seconds.
	OldestWait float64 `json:"oldest_wait_s"`
	// HeldBy is why the last of its jobs deferred waited: a limit, a cap,
	// a pause, a downstream's hold.
	HeldBy string `json:"held_by,omitempty"`
	// DeadLetters counts its jobs dead-lettered in the last hour.
	DeadLetters int64 `json:"dead_letters_1h"`
}

// Waiting is the row's jobs waiting, of every kind.
func (r TopRow) Waiting() int64 { return r.Naked + r.Moved + r.Parked + r.Paused }

// rows returns a row per tenant with anything to show at now, forgetting
// tenants with nothing; paused says whether a tenant is paused still (its
// paused jobs are dropped once it is not: a resume released them).
func (w *waiting) rows(now time.Time, paused func(string) bool) []TopRow {
	sec := now.Unix()
	slot := now.Unix() / int64(dlSlot/time.Second)
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]TopRow, 0, len(w.tenants))
	for t, tw := range w.tenants {
		r := TopRow{Tenant: t}
		oldest := int64(1<<63 - 1)
		live := tw.buckets[:0]
		var stillPaused *bool
		for _, b := range tw.buckets {
			if b.due <= sec {
				continue
			}
			if b.kind == WaitPaused {
				if stillPaused == nil {
					p := paused == nil || paused(t)
					stillPaused = &p
				}
				if !*stillPaused {
					continue
				}
			}
			live = append(live, b)
			switch b.kind {
			case WaitNaked:
				r.Naked += int64(b.n)
			case WaitMoved:
				r.Moved += int64(b.n)
			case WaitParked:
				r.Parked += int64(b.n)
			case WaitPaused:
				r.Paused += int64(b.n)
			}
			if b.n > 0 {
				oldest = min(oldest, b.oldest)
			}
		}
		clear(tw.buckets[len(live):])
		tw.buckets = live
		idle := tw.rateBase <= sec-rateSeconds // nothing counted in the rates' window
		tw.roll(sec)
		r.Admitted, r.Deferred = rate(&tw.admitted, sec), rate(&tw.deferred, sec)
		if tw.dead != nil {
			tw.rollDead(slot)
			for _, n := range tw.dead {
				r.DeadLetters += int64(n)
			}
		}
		if len(live) == 0 && r.Admitted == 0 && r.Deferred == 0 && r.DeadLetters == 0 && idle {
			delete(w.tenants, t) // nothing to show: forget it
			continue
		}
		if len(live) > 0 && oldest != 1<<63-1 {
			r.OldestWait = max(0, float64(now.UnixMicro()-oldest)/1e6)
		}
		if r.Waiting() > 0 || r.Deferred > 0 {
			r.HeldBy = tw.heldBy
		}
		out = append(out, r)
	}
	return out
}

package consumer

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// FairDeferrer chooses, per job, between NAK'ing and moving it. Short waits
// are NAK'd, which is cheap and precise; a job is moved off the consumer when
// its wait is at least MoveAfter, when its tenant already holds TenantShare
// NAK'd jobs on this worker, so that one tenant's backlog cannot fill
// MaxAckPending and starve the others, or when the consumer is crowded
// (AckPending past 900), where NAKs would lose their precision. Safe for
// concurrent use.
type FairDeferrer struct {
	// Nak defers short waits. Defaults to NakDeferrer.
	Nak Deferrer
	// Move takes jobs off the consumer. Required.
	Move Deferrer
	// MoveAfter is the shortest wait that is moved. Defaults to 5s.
	MoveAfter time.Duration
	// TenantShare is how many NAK'd jobs one tenant may have waiting on this
	// worker before its jobs are moved. Defaults to 50.
	TenantShare int
	// MaxNaked is how many NAK'd jobs, of all tenants, this worker may have
	// waiting before every job is moved: it keeps the consumer below 900
	// pending from the start, before AckPending has a count to tell
	// (NakedPerWorker does for two workers). Defaults to 0 (no cap).
	MaxNaked int
	// MaxAge is the jobs stream's MaxAge (0: none). A NAK'd job stays the
	// same message, which the stream drops once it is MaxAge old, so a job
	// whose message would be older than half of it when it came back is
	// moved instead: its copy is a new message. Give Move a MaxWait under
	// half of it too.
	MaxAge time.Duration
	// Now is the clock the NAK'd jobs' waits and the messages' ages are
	// read from. Defaults to time.Now.
	Now func() time.Time
	// AckPending, when set, is the consumer's ack-pending count (-1 when
	// unknown): from 900 on, every job is moved. Defaults to nil (never
	// crowded).
	AckPending func() int

	mu      sync.Mutex
	waiting map[string]*expiries
	naked   expiries  // when each NAK'd job of any tenant comes back
	pruned  time.Time // when prune last ran
}

// Defer implements Deferrer.
func (f *FairDeferrer) Defer(ctx context.Context, ds []Deferral) {
	var naks, moves []int
	for i := range ds {
		// A paused job waits off the consumer however short its wait (its
		// pause ends soon): a resume finds it there, and it holds no
		// MaxAckPending slot meanwhile.
		if ds[i].Paused || f.crowded() || f.tooOldToNak(ds[i]) || f.shouldMove(ds[i].Job.Tenant, ds[i].Wait) {
			moves = append(moves, i)
		} else {
			naks = append(naks, i)
		}
	}
	nak := f.Nak
	if nak == nil {
		nak = NakDeferrer{}
	}
	run := func(d Deferrer, idx []int) {
		if len(idx) == 0 {
			return
		}
		sub := make([]Deferral, len(idx))
		for k, i := range idx {
			sub[k] = ds[i]
		}
		d.Defer(ctx, sub)
		for k, i := range idx {
			ds[i] = sub[k]
		}
	}
	run(nak, naks)
	run(f.Move, moves)
}

// crowded reports whether the consumer has so many messages pending that
// a NAK delay would lose its precision.
func (f *FairDeferrer) crowded() bool {
	return f.AckPending != nil && f.AckPending() >= crowdedAt
}

// tooOldToNak reports whether the stream's MaxAge could drop df's message
// before it comes back from a NAK: it would be older than half of MaxAge
// then. A message without metadata is taken to be that old.
func (f *FairDeferrer) tooOldToNak(df Deferral) bool {
	if f.MaxAge <= 0 {
		return false
	}
	meta, err := df.Msg.Metadata()
	if err != nil || meta == nil {
		return true
	}
	return clock(f.Now)().Sub(meta.Timestamp)+df.Wait > f.MaxAge/2
}

// shouldMove decides the path and, for a NAK, books the tenant's share
// until the wait has passed.
func (f *FairDeferrer) shouldMove(tenant string, wait time.Duration) bool {
	after := f.MoveAfter
	if after == 0 {
		after = 5 * time.Second
	}
	if wait >= after {
		return true
	}
	share := f.TenantShare
	if share == 0 {
		share = 50
	}
	now := clock(f.Now)()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.waiting == nil {
		f.waiting = map[string]*expiries{}
	}
	e := f.waiting[tenant]
	if e == nil {
		e = &expiries{}
		f.waiting[tenant] = e
	}
	for e.Len() > 0 && !(*e)[0].After(now) {
		heap.Pop(e)
	}
	for f.naked.Len() > 0 && !f.naked[0].After(now) {
		heap.Pop(&f.naked)
	}
	if e.Len() >= share || (f.MaxNaked > 0 && f.naked.Len() >= f.MaxNaked) {
		return true
	}
	heap.Push(e, now.Add(wait))
	heap.Push(&f.naked, now.Add(wait))
	if len(f.waiting) > 1024 && now.Sub(f.pruned) > time.Second {
		f.prune(now)
	}
	return false
}

// prune forgets tenants with nothing waiting, at most once a second.
// Called with mu held.
func (f *FairDeferrer) prune(now time.Time) {
	f.pruned = now
	for t, e := range f.waiting {
		for e.Len() > 0 && !(*e)[0].After(now) {
			heap.Pop(e)
		}
		if e.Len() == 0 {
			delete(f.waiting, t)
		}
	}
}

// expiries is a min-heap of times.
type expiries []time.Time

func (e expiries) Len() int { return len(e) }

func (e expiries) Less(i, j int) bool { return e[i].Before(e[j]) }

func (e expiries) Swap(i, j int) { e[i], e[j] = e[j], e[i] }

func (e *expiries) Push(x any) { *e = append(*e, x.(time.Time)) }

func (e *expiries) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

package fastlane

import (
	"sync"
	"time"
)

// backlog is what the lane knows of the jobs consumer's backlog: how far
// it has delivered, and, per tenant, its latest job left to it and the
// jobs the lane took past that position. It books each arriving job either
// for the lane or for the jobs consumer, so that a tenant's jobs keep
// their order: once one of its jobs is left to the consumer, its later
// jobs are too, until the consumer has delivered that one. Safe for
// concurrent use.
type backlog struct {
	mu      sync.Mutex
	pos     uint64              // highest stream sequence the jobs consumer delivered here
	pending uint64              // jobs it had left to deliver then
	queued  map[string]uint64   // tenant → its latest job left to the jobs consumer
	taken   map[string][]uint64 // tenant → jobs the lane took whose originals lie past pos
	pruned  time.Time
}

func newBacklog() backlog {
	return backlog{queued: map[string]uint64{}, taken: map[string][]uint64{}}
}

// observe records the jobs consumer's position (a delivered message's
// stream sequence and the jobs left to deliver after it) and returns the
// jobs left to deliver.
func (b *backlog) observe(seq, pending uint64) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if seq > b.pos {
		b.pos, b.pending = seq, pending
	}
	return b.pending
}

// book decides, at now, whether the lane takes the tenant's job stored at
// seq: when the jobs consumer still has at least backlog jobs to deliver
// before it, the tenant has nothing queued there, and the lane holds fewer
// than share of its jobs. It books the job either way.
func (b *backlog) book(tenant string, seq uint64, backlog, share int, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.Sub(b.pruned) > time.Second {
		b.prune()
		b.pruned = now
	}
	if b.pos == 0 {
		// The jobs consumer has delivered nothing here yet: where the job
		// stands is unknown. It is left to the consumer, but its tenant's
		// later jobs are not held behind it, which could be a whole
		// backlog behind.
		return false
	}
	taken := b.taken[tenant]
	for len(taken) > 0 && taken[0] <= b.pos {
		taken = taken[1:]
	}
	take := seq > b.pos && b.pending >= uint64(backlog) && b.queued[tenant] <= b.pos && len(taken) < share
	if take {
		b.taken[tenant] = append(taken, seq)
	} else {
		b.queued[tenant] = seq
		b.taken[tenant] = taken
	}
	return take
}

// leave books a job for the jobs consumer: one the lane took and gives
// back, or one it does not take. Its tenant's later jobs stay behind it.
func (b *backlog) leave(tenant string, seq uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.queued[tenant] = max(b.queued[tenant], seq)
	taken := b.taken[tenant]
	for i, s := range taken {
		if s == seq {
			b.taken[tenant] = append(taken[:i:i], taken[i+1:]...)
			break
		}
	}
}

// prune forgets tenants with nothing left past the jobs consumer's
// position. Called with mu held.
func (b *backlog) prune() {
	for t, s := range b.queued {
		if s <= b.pos {
			delete(b.queued, t)
		}
	}
	for t, taken := range b.taken {
		if len(taken) == 0 || taken[len(taken)-1] <= b.pos {
			delete(b.taken, t)
		}
	}
}

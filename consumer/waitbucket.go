package consumer

import "slices"

// waitBucket is n jobs of one kind this worker sent to wait (negative: jobs
// sent by any worker that came back early), coming back evenly spread over
// [from, due] (Unix ms; from == due: all at due), the oldest first
// published at oldest and the newest at newest (Unix µs). n is a float: a bucket partly back is
// cut at the present (rebase) before it is merged. Counting a bucket as draining evenly keeps
// a tenant's count close to the truth while a backlog drains with a few
// buckets, where counting each bucket whole until its last job is back
// counts the drained ones for the whole span.
type waitBucket struct {
	from   int64 // Unix ms
	due    int64 // Unix ms
	oldest int64
	newest int64
	n      float32
	kind   waitKind
}

// sameSet reports whether b and c count jobs of one kind and one sign,
// so that they can be merged.
func (b waitBucket) sameSet(c waitBucket) bool { return b.kind == c.kind && (b.n > 0) == (c.n > 0) }

// at is how many of the bucket's jobs are still away at t (Unix ms): all
// before from, none from due on, in proportion in between.
func (b waitBucket) at(t int64) float64 {
	switch {
	case t >= b.due:
		return 0
	case t <= b.from:
		return float64(b.n)
	}
	return float64(b.n) * float64(b.due-t) / float64(b.due-b.from)
}

// rebase returns b cut at now: the part of its span still ahead, with the
// jobs still away. Its count from now on is the same.
func (b waitBucket) rebase(now int64) waitBucket {
	if b.from < now && now < b.due {
		b.oldest = b.oldestAt(now)
		b.n = float32(b.at(now))
		b.from = now
	}
	return b
}

// oldestAt is when the oldest of the bucket's jobs still away at t (Unix
// ms) was first published. Jobs come back in about the order they were
// published (their slots are given in it), so as the bucket drains its
// oldest moves from oldest towards newest in proportion: keeping oldest
// until the last job is back would report the wait of jobs that ran long
// ago.
func (b waitBucket) oldestAt(t int64) int64 {
	if t <= b.from || b.newest <= b.oldest || b.due <= b.from {
		return b.oldest
	}
	if t >= b.due {
		return b.newest
	}
	return b.oldest + int64(float64(b.newest-b.oldest)*float64(t-b.from)/float64(b.due-b.from))
}

// justBefore is at's limit just before t: a bucket whose jobs all come
// back at due still counts them there.
func (b waitBucket) justBefore(t int64) float64 {
	if t == b.due && b.from == b.due {
		return float64(b.n)
	}
	return b.at(t)
}

// merged is b and c as one bucket spanning both.
func (b waitBucket) merged(c waitBucket) waitBucket {
	return waitBucket{from: min(b.from, c.from), due: max(b.due, c.due), oldest: min(b.oldest, c.oldest), newest: max(b.newest, c.newest),
		n: b.n + c.n, kind: b.kind}
}

// mergeError is how far the count of b and c merged is off theirs,
// summed over time (job·ms). All three are piecewise linear, bent or
// broken only at the four ends, so it is summed piece by piece between
// them (a trapezoid each: close enough where the difference changes
// sign).
func (b waitBucket) mergeError(c waitBucket) float64 {
	m := b.merged(c)
	ends := [4]int64{b.from, b.due, c.from, c.due}
	slices.Sort(ends[:])
	diff := func(t int64, left bool) float64 {
		if left {
			return abs64(m.justBefore(t) - b.justBefore(t) - c.justBefore(t))
		}
		return abs64(m.at(t) - b.at(t) - c.at(t))
	}
	sum := 0.0
	for k := 1; k < len(ends); k++ {
		sum += float64(ends[k]-ends[k-1]) * (diff(ends[k-1], false) + diff(ends[k], true)) / 2
	}
	return sum
}

func abs64(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// extendedBy reports whether c, all of whose jobs come back at one time,
// can join b at next to no cost in accuracy: at b's time, or just past
// either end of b, by no more than about twice the gap between b's jobs
// (a second for a bucket of one job). It is the cheap path for a tenant
// whose jobs are deferred in slot order, one after the other.
func (b waitBucket) extendedBy(c waitBucket) bool {
	if !b.sameSet(c) || c.from != c.due {
		return false
	}
	var gap int64
	switch {
	case c.due > b.due:
		gap = c.due - b.due
	case c.due < b.from:
		gap = b.from - c.due
	case b.from == b.due: // c.due == b.due
		return true
	default:
		return false // inside b's span: left to squeeze, which weighs it
	}
	return float64(gap)*abs64(float64(b.n)) <= float64(2*(b.due-b.from)+1000)
}

// maxBuckets caps a tenant's buckets: past it the two of one set whose
// merging changes the count least are merged (counted a little off for a
// while, never lost, never past the later due). A tenant's jobs deferred
// in slot order rarely need it: each extends its last bucket. Kept inline, so that
// reading every tenant is one pass over memory.
const maxBuckets = 6

// add merges b into the record's buckets at now (Unix ms).
func (tw *tenantWaits) add(b waitBucket, now int64) {
	for i := range tw.nb {
		if c := &tw.buckets[i]; c.due > now && c.extendedBy(b) {
			*c = c.merged(b)
			return
		}
	}
	// Buckets all back are dropped first: merged into one still away,
	// their jobs would count again.
	live := 0
	for _, c := range tw.buckets[:tw.nb] {
		if c.due > now {
			tw.buckets[live] = c
			live++
		}
	}
	tw.nb = live
	if tw.nb < maxBuckets {
		tw.buckets[tw.nb] = b
		tw.nb++
		return
	}
	tw.squeeze(b, now)
}

// squeeze fits b into full buckets at now: of the buckets and b, cut at
// now, it merges the two of one set whose merging is off the least from
// now on.
func (tw *tenantWaits) squeeze(b waitBucket, now int64) {
	var all [maxBuckets + 1]waitBucket
	for i, c := range tw.buckets[:tw.nb] {
		all[i] = c.rebase(now)
	}
	all[tw.nb] = b.rebase(now)
	n := tw.nb + 1
	best, bi, bj := 0.0, -1, -1
	for i := range n {
		for j := i + 1; j < n; j++ {
			if !all[i].sameSet(all[j]) {
				continue
			}
			if e := all[i].mergeError(all[j]); bi < 0 || e < best {
				best, bi, bj = e, i, j
			}
		}
	}
	if bi < 0 {
		// Cannot happen: there are fewer sets (four kinds, and woken
		// parked jobs) than maxBuckets+1. Leave b out.
		return
	}
	all[bi] = all[bi].merged(all[bj])
	all[bj] = all[n-1]
	copy(tw.buckets[:], all[:n-1])
}

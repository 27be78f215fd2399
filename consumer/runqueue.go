package consumer

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// queued is an admitted job waiting for a handler slot.
type queued struct {
	msg jetstream.Msg
	job Job
}

// runQueue holds admitted jobs until a handler slot is free: a queue per
// tenant, oldest first, served with the tenants taking turns. So when every
// slot is busy, a job of a quiet tenant waits for one slot to free up, not
// for every job a flooding tenant had admitted before it, and deciding the
// next jobs never waits for a slot. Safe for concurrent use.
type runQueue struct {
	mu     sync.Mutex
	queues map[string][]queued // a tenant's waiting jobs, oldest first
	turn   []string            // tenants with waiting jobs, next to serve first
	n      int                 // jobs waiting
	closed bool
	wake   chan struct{} // holds a token once a job is added or the queue closed
}

func newRunQueue() *runQueue {
	return &runQueue{queues: map[string][]queued{}, wake: make(chan struct{}, 1)}
}

// push adds jobs, in order, each behind the earlier jobs of its tenant.
func (q *runQueue) push(jobs []queued) {
	if len(jobs) == 0 {
		return
	}
	q.mu.Lock()
	for _, j := range jobs {
		t := j.job.Tenant
		if len(q.queues[t]) == 0 {
			q.turn = append(q.turn, t)
		}
		q.queues[t] = append(q.queues[t], j)
	}
	q.n += len(jobs)
	q.mu.Unlock()
	q.signal()
}

// close says no job will be pushed any more.
func (q *runQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

func (q *runQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// pop returns the oldest job of the tenant whose turn it is, waiting for
// one. It returns false once the queue is closed and empty, or ctx is done.
func (q *runQueue) pop(ctx context.Context) (queued, bool) {
	for {
		q.mu.Lock()
		if q.n > 0 {
			t := q.turn[0]
			q.turn = q.turn[1:]
			jobs := q.queues[t]
			j := jobs[0]
			jobs[0] = queued{} // let the message be collected
			if jobs = jobs[1:]; len(jobs) > 0 {
				q.queues[t] = jobs
				q.turn = append(q.turn, t) // its next job waits for the others' turns
			} else {
				delete(q.queues, t)
			}
			q.n--
			more := q.n > 0
			q.mu.Unlock()
			if more {
				q.signal() // keep the token for the next pop
			}
			return j, true
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return queued{}, false
		}
		select {
		case <-q.wake:
		case <-ctx.Done():
			return queued{}, false
		}
	}
}

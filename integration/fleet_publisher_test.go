package integration

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	// fleetIDHeader carries a fleet job's unique id (its data too), which
	// the worker forwards and dead-letters with the job.
	fleetIDHeader = "Fleet-Id"
	// fleetSentHeader carries a fleet job's first publish time, Unix ns.
	fleetSentHeader = "Fleet-Sent"
	// fleetRetryEvery is the pause before a failed publish is sent again.
	fleetRetryEvery = 200 * time.Millisecond
	// fleetGiveUp is how long a job's publish is retried. It stays under
	// the jobs stream's 2-minute duplicate window, so a retry of a publish
	// the server did store is dropped as a duplicate, never stored twice.
	fleetGiveUp = 90 * time.Second
)

// fleetPublisher publishes jobs asynchronously and sends each again, with
// the same Nats-Msg-Id, until the server acknowledges it: during a NATS
// failover a publish may time out or find no stream leader, and the
// publisher itself must never lose a job. It records which ids were
// acknowledged.
type fleetPublisher struct {
	js jetstream.JetStream

	wg         sync.WaitGroup
	retries    atomic.Int64 // publishes sent again
	duplicates atomic.Int64 // acks saying the server already had the id

	mu     sync.Mutex
	acked  map[string]string // id → tenant
	failed map[string]error  // id → last error, given up after fleetGiveUp
}

// newFleetPublisher returns a publisher on js, which must have a publish
// async timeout set (a future otherwise waits forever for a lost ack).
func newFleetPublisher(js jetstream.JetStream) *fleetPublisher {
	return &fleetPublisher{js: js, acked: map[string]string{}, failed: map[string]error{}}
}

// run publishes, for every tenant, rate × 3 jobs a second to jobs.<tenant>
// until ctx ends or for d, whichever is first, paced every 10 ms.
func (p *fleetPublisher) run(ctx context.Context, tenants []fleetTenant, d time.Duration) {
	start := time.Now()
	sent := make([]int, len(tenants))
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			elapsed := now.Sub(start)
			if elapsed >= d {
				return
			}
			for i, t := range tenants {
				due := int(math.Floor(t.publishRate() * elapsed.Seconds()))
				for ; sent[i] < due; sent[i]++ {
					p.publish(t.name, fmt.Sprintf("%s-%06d", t.name, sent[i]), now)
				}
			}
		}
	}
}

// publish sends one job and, in the background, sends it again until it
// is acknowledged or fleetGiveUp passes.
func (p *fleetPublisher) publish(tenant, id string, at time.Time) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		var lastErr error
		for attempt := 0; time.Since(at) < fleetGiveUp; attempt++ {
			if attempt > 0 {
				p.retries.Add(1)
				time.Sleep(fleetRetryEvery)
			}
			f, err := p.js.PublishMsgAsync(fleetJob(tenant, id, at))
			if err != nil {
				lastErr = err
				continue
			}
			select {
			case ack := <-f.Ok():
				if ack.Duplicate {
					p.duplicates.Add(1)
				}
				p.mu.Lock()
				p.acked[id] = tenant
				p.mu.Unlock()
				return
			case err := <-f.Err():
				lastErr = err
			}
		}
		p.mu.Lock()
		p.failed[id] = lastErr
		p.mu.Unlock()
	}()
}

// wait waits until every publish was acknowledged or given up, and returns
// the acknowledged ids (id → tenant) and those given up.
func (p *fleetPublisher) wait() (acked map[string]string, failed map[string]error) {
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.acked, p.failed
}

// fleetJob is the message of one job: its id as data and in a header, its
// first publish time in another, and the id as Nats-Msg-Id so that the
// jobs stream stores a job sent again once.
func fleetJob(tenant, id string, at time.Time) *nats.Msg {
	m := nats.NewMsg("jobs." + tenant)
	m.Data = []byte(id)
	m.Header.Set(fleetIDHeader, id)
	m.Header.Set(fleetSentHeader, strconv.FormatInt(at.UnixNano(), 10))
	m.Header.Set(jetstream.MsgIDHeader, id)
	return m
}

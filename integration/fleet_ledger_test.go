package integration

import (
	"context"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// fleetLedger records where the fleet's jobs ended up: every message of
// the forward and dead-letter streams, read with ordered consumers (which
// resume where they left off across a server's loss), and every forward a
// plain subscription to done.> sees, which includes a job forwarded twice
// that the output stream stored once.
type fleetLedger struct {
	mu        sync.Mutex
	stored    map[string][]time.Time // id → stored times in the forward stream
	tenantOf  map[string]string      // id → tenant, from the forward subject
	dead      map[string]string      // id → Throttler-Reason
	published map[string]int         // id → forwards seen on done.>
	seen      int                    // forwards seen on done.>, in all
}

// startFleetLedger starts reading the forward and dead-letter streams
// through js and subscribes to done.> on nc, until the test ends.
func startFleetLedger(tb testing.TB, nc *nats.Conn, js jetstream.JetStream, forward, dlq string) *fleetLedger {
	tb.Helper()
	l := &fleetLedger{stored: map[string][]time.Time{}, tenantOf: map[string]string{}, dead: map[string]string{}, published: map[string]int{}}
	sub, err := nc.Subscribe("done.>", func(m *nats.Msg) {
		l.mu.Lock()
		l.published[m.Header.Get(fleetIDHeader)]++
		l.seen++
		l.mu.Unlock()
	})
	must(tb, err, "subscribe done.>")
	must(tb, sub.SetPendingLimits(-1, -1), "pending limits")
	tb.Cleanup(func() { _ = sub.Unsubscribe() })

	l.consume(tb, js, forward, func(m jetstream.Msg, at time.Time) {
		id := m.Headers().Get(fleetIDHeader)
		l.stored[id] = append(l.stored[id], at)
		l.tenantOf[id] = strings.TrimPrefix(m.Subject(), "done.")
	})
	l.consume(tb, js, dlq, func(m jetstream.Msg, _ time.Time) {
		l.dead[m.Headers().Get(fleetIDHeader)] = m.Headers().Get("Throttler-Reason")
	})
	return l
}

// consume reads stream from its start with an ordered consumer, calling
// record with each message and its stored time under l.mu.
func (l *fleetLedger) consume(tb testing.TB, js jetstream.JetStream, stream string, record func(jetstream.Msg, time.Time)) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	must(tb, err, "stream %s", stream)
	oc, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	must(tb, err, "ordered consumer on %s", stream)
	cc, err := oc.Consume(func(m jetstream.Msg) {
		meta, err := m.Metadata()
		if err != nil {
			return
		}
		l.mu.Lock()
		record(m, meta.Timestamp)
		l.mu.Unlock()
	})
	must(tb, err, "consume %s", stream)
	tb.Cleanup(cc.Stop)
}

// missing returns how many of the ids in acked are neither forwarded nor
// dead-lettered yet.
func (l *fleetLedger) missing(acked map[string]string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for id := range acked {
		if len(l.stored[id]) == 0 && l.dead[id] == "" {
			n++
		}
	}
	return n
}

// fleetAccount is the ledger's verdict on the acknowledged jobs.
type fleetAccount struct {
	lost           []string // acknowledged, neither forwarded nor dead-lettered
	deadLettered   int
	forwarded      int // distinct ids in the forward stream
	storedTwice    int // ids the forward stream stored more than once
	ranTwice       int // ids seen more than once on done.>
	seen, distinct int // forwards seen on done.>, and distinct ids among them
	strangers      int // forwarded ids never acknowledged to the publisher
}

// account matches the acknowledged ids against the forwards and dead
// letters by id.
func (l *fleetLedger) account(acked map[string]string) fleetAccount {
	l.mu.Lock()
	defer l.mu.Unlock()
	var a fleetAccount
	for id := range acked {
		if len(l.stored[id]) == 0 && l.dead[id] == "" {
			a.lost = append(a.lost, id)
		}
	}
	sort.Strings(a.lost)
	for id, at := range l.stored {
		a.forwarded++
		if len(at) > 1 {
			a.storedTwice++
		}
		if _, ok := acked[id]; !ok {
			a.strangers++
		}
	}
	a.deadLettered = len(l.dead)
	for _, n := range l.published {
		a.distinct++
		if n > 1 {
			a.ranTwice++
		}
	}
	a.seen = l.seen
	return a
}

// forwardTimesOf returns, per tenant, the stored time of each job's first
// forward, in order.
func (l *fleetLedger) forwardTimesOf() map[string][]time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]time.Time{}
	for id, at := range l.stored {
		out[l.tenantOf[id]] = append(out[l.tenantOf[id]], at[0])
	}
	for _, ts := range out {
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	}
	return out
}

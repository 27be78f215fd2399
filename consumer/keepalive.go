package consumer

import (
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// inHand is every message the worker holds and has not yet acked or
// handed back: pulled and not yet acted on, and admitted (flights). It
// keeps them alive while the worker holds them.
type inHand struct {
	pulled  heldMsgs      // messages pulled and not yet acted on
	flights sync.Map      // *flight → struct{}, admitted jobs, running or waiting for a slot
	every   time.Duration // Config.InProgressEvery
	now     func() time.Time
	log     *slog.Logger
}

// count is how many messages are in hand, pulled or admitted.
func (h *inHand) count() int {
	n := h.pulled.count()
	h.flights.Range(func(_, _ any) bool {
		n++
		return true
	})
	return n
}

// startKeepAlive keeps alive every job the worker holds (keepAliveLoop)
// until stop is called; stop returns once the loop has ended.
func (h *inHand) startKeepAlive() (stop func()) { return startLoop(h.keepAliveLoop) }

// keepAliveLoop tells JetStream every InProgressEvery that each job the
// worker holds is still alive (InProgress): running, waiting for a handler
// slot, or pulled and not yet decided (while Redis is down, say). A long
// handler, or a long wait behind long handlers, then outlives AckWait
// without a redelivery that would run the job twice. One ticker serves all
// jobs; a job held less than InProgressEvery needs nothing yet. How long a
// job has been held is read from the worker's clock, which stamped it, not
// from the ticker's.
func (h *inHand) keepAliveLoop(done <-chan struct{}) {
	t := time.NewTicker(h.every)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			now := h.now()
			h.flights.Range(func(k, _ any) bool {
				f := k.(*flight)
				if now.Sub(f.started) >= h.every && !f.settled.Load() {
					if err := f.msg.InProgress(); err != nil {
						h.log.Warn("in-progress signal failed", "subject", f.msg.Subject(), "err", err)
					}
				}
				return true
			})
			for _, msg := range h.pulled.pulledBy(now.Add(-h.every)) {
				if err := msg.InProgress(); err != nil {
					h.log.Warn("in-progress signal failed", "subject", msg.Subject(), "err", err)
				}
			}
		}
	}
}

// heldMsgs are the messages a worker has pulled and not yet acted on, with
// when each was pulled. Safe for concurrent use; the zero value is ready.
type heldMsgs struct {
	mu   sync.Mutex
	msgs map[jetstream.Msg]time.Time
}

// add records msg as pulled at at.
func (h *heldMsgs) add(msg jetstream.Msg, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.msgs == nil {
		h.msgs = make(map[jetstream.Msg]time.Time)
	}
	h.msgs[msg] = at
}

// remove forgets msg.
func (h *heldMsgs) remove(msg jetstream.Msg) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.msgs, msg)
}

// count is how many messages are held.
func (h *heldMsgs) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.msgs)
}

// pulledBy returns the messages pulled at or before t.
func (h *heldMsgs) pulledBy(t time.Time) []jetstream.Msg {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []jetstream.Msg
	for msg, at := range h.msgs {
		if !at.After(t) {
			out = append(out, msg)
		}
	}
	return out
}

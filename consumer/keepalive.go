package consumer

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// startKeepAlive keeps alive every job the worker holds (keepAliveLoop)
// until stop is called; stop returns once the loop has ended.
func (w *Worker) startKeepAlive() (stop func()) { return startLoop(w.keepAliveLoop) }

// keepAliveLoop tells JetStream every InProgressEvery that each job the
// worker holds is still alive (InProgress): running, waiting for a handler
// slot, or pulled and not yet decided (while Redis is down, say). A long
// handler, or a long wait behind long handlers, then outlives AckWait
// without a redelivery that would run the job twice. One ticker serves all
// jobs; a job held less than InProgressEvery needs nothing yet. How long a
// job has been held is read from the worker's clock, which stamped it, not
// from the ticker's.
func (w *Worker) keepAliveLoop(done <-chan struct{}) {
	t := time.NewTicker(w.cfg.InProgressEvery)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			now := w.now()
			w.inflight.Range(func(k, _ any) bool {
				f := k.(*flight)
				if now.Sub(f.started) >= w.cfg.InProgressEvery && !f.settled.Load() {
					if err := f.msg.InProgress(); err != nil {
						w.log.Warn("in-progress signal failed", "subject", f.msg.Subject(), "err", err)
					}
				}
				return true
			})
			for _, msg := range w.held.pulledBy(now.Add(-w.cfg.InProgressEvery)) {
				if err := msg.InProgress(); err != nil {
					w.log.Warn("in-progress signal failed", "subject", msg.Subject(), "err", err)
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

package consumer

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// inHand is every message the worker holds and has not yet acked or
// handed back: pulled and not yet acted on, and admitted (flights). It
// keeps them alive while the worker holds them.
type inHand struct {
	pulled  pulledMsgs    // messages pulled and not yet acted on (fetch.go)
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
func (h *inHand) startKeepAlive(_, _ context.Context) (stop func()) {
	return startLoop(h.keepAliveLoop)
}

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

package consumer

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/top"
)

// topReporter answers throttler top with what the worker knows of each
// tenant (waiting), told by the stages as jobs pass them.
type topReporter struct {
	waiting *waiting
	pauses  *pauseGate // the worker's, for the tenants paused
	js      jetstream.JetStream
	subject string // Config.TopSubject, "" for none
	now     func() time.Time
	log     *slog.Logger
}

// listen answers the requests of `throttler top` on
// Config.TopSubject until the returned stop is called: each is answered
// with this worker's rows (TopRows), in as many messages as they need.
// A worker has it when it has a TopSubject and a connection.
func (r *topReporter) listen(_, _ context.Context) (stop func()) {
	nc := r.js.Conn()
	id := strings.TrimPrefix(nats.NewInbox(), "_INBOX.")
	sub, err := nc.Subscribe(r.subject, func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		var failed error
		r.encode(id, func(chunk []byte) {
			if failed == nil {
				failed = nc.Publish(m.Reply, chunk) // copies chunk
			}
		})
		if failed != nil {
			r.log.Debug("answering throttler top failed", "err", failed)
		}
	})
	if err != nil {
		r.log.Warn("listening for throttler top failed; this worker is missing from it", "err", err)
		return func() {}
	}
	return func() { _ = sub.Unsubscribe() }
}

// encode encodes this worker's rows as the messages of its reply,
// without building them first, and hands each to emit as it is cut (see
// top.EncodeRows); emit must not keep it.
func (r *topReporter) encode(id string, emit func([]byte)) {
	e := top.NewEncoder(id, emit)
	now := r.now()
	r.waiting.visit(now, r.pauses.pausedAt(now), e.Add)
	e.Finish()
}

// TopRows returns this worker's view of every tenant it knows something
// of now: its rates, the jobs it sent to wait that are not back yet, its
// dead letters in the last hour.
func (w *Worker) TopRows() []top.Row { return w.top.rows() }

// rows returns the worker's rows now, as TopRows.
func (r *topReporter) rows() []top.Row {
	now := r.now()
	return r.waiting.rows(now, r.pauses.pausedAt(now))
}

package consumer

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/throttler/throttler/subject"
	tenantpkg "github.com/throttler/throttler/tenant"
)

// deadLetter publishes a job that cannot or must not run to the dead-letter
// subject, with the reason in a header, and waits for the publish ack.
type deadLetter struct {
	js       jetstream.JetStream
	template subject.Template
}

// publish sends msg's data and headers to the dead-letter subject of tenant
// (tenant.Invalid when it is empty), with reason and the original
// location in headers.
func (d deadLetter) publish(ctx context.Context, msg jetstream.Msg, id, tenant, reason string, failures int64) error {
	subjTenant := tenant
	if subjTenant == "" {
		subjTenant = tenantpkg.Invalid
	}
	out := &nats.Msg{Subject: d.template.Render(subjTenant), Data: msg.Data(), Header: nats.Header{}}
	CopyHeaders(out.Header, msg.Headers())
	if out.Header.Get(HeaderSubject) == "" {
		out.Header.Set(HeaderSubject, msg.Subject())
	}
	out.Header.Set(HeaderReason, reason)
	out.Header.Set(HeaderJobID, id)
	if tenant != "" {
		out.Header.Set(HeaderTenant, tenant)
	}
	if failures > 0 {
		out.Header.Set(HeaderFailures, strconv.FormatInt(failures, 10))
	}
	out.Header.Set(jetstream.MsgIDHeader, "dlq:"+id)
	if _, err := d.js.PublishMsg(ctx, out); err != nil {
		return fmt.Errorf("dead-letter to %s: %w", out.Subject, err)
	}
	return nil
}

// deadLetterAsync dead-letters msg in its own goroutine.
func (w *Worker) deadLetterAsync(ctx context.Context, msg jetstream.Msg, id, tenant, reason string, failures int64) {
	w.handlers.Add(1)
	go func() {
		defer w.handlers.Done()
		w.deadLetterSync(ctx, msg, id, tenant, reason, failures)
	}()
}

// deadLetterSync publishes msg to the dead-letter subject, then terminates
// it, and reports whether it did. If the publish fails the message is
// handed back with a delay, never terminated, so nothing is lost.
func (w *Worker) deadLetterSync(ctx context.Context, msg jetstream.Msg, id, tenant, reason string, failures int64) bool {
	if id == "" {
		if meta, err := msg.Metadata(); err == nil {
			id = fmt.Sprintf("%s:%d", meta.Stream, meta.Sequence.Stream)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := w.dlq.publish(pctx, msg, id, tenant, reason, failures)
	cancel()
	if err != nil {
		w.log.Error("dead-letter publish failed; handing the job back", "job", id, "err", err)
		if nerr := msg.NakWithDelay(w.cfg.RetryInitial); nerr != nil {
			w.log.Warn("hand back failed; JetStream redelivers after AckWait", "job", id, "err", nerr)
		}
		return false
	}
	w.stats.Add(tenant, func(s *TenantStats) { s.DeadLettered++ })
	w.log.Warn("job dead-lettered", "job", id, "tenant", tenant, "reason", reason)
	term := msg.Term
	if w.cfg.TermWithReason {
		term = func() error { return msg.TermWithReason(truncate(reason, 256)) }
	}
	if err := term(); err != nil {
		w.log.Warn("term failed; JetStream redelivers after AckWait and the dead letter is deduplicated", "job", id, "err", err)
	}
	return true
}

// truncate shortens s to at most n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

package consumer

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/subject"
	tenantpkg "github.com/throttler/throttler/tenant"
	"github.com/throttler/throttler/throttle"
)

// deadLetter publishes a job that cannot or must not run to the dead-letter
// subject, with the reason in a header, and waits for the publish ack;
// then it terminates the job, or hands it back if the publish failed.
type deadLetter struct {
	js       jetstream.JetStream
	template subject.Template
	handlers *sync.WaitGroup // the worker's: shutdown waits for a dead letter under way
	rec      *recorder
	cfg      Config
	log      *slog.Logger
}

// maxReasonBytes bounds the reason header of a dead letter.
const maxReasonBytes = 4096

// publish sends msg's data and headers to the dead-letter subject of tenant
// (tenant.Invalid when it is empty), with reason and the original
// location in headers. It reports whether the dead letter had to be cut
// to fit: when the original with the dead letter's headers is over the
// server's or the stream's limits, it stores instead the reason, the job's
// id, subject and tenant, the original's size and as much of its data as
// fits (possibly none), marked header.Truncated; the reason then says where
// the original stays readable.
func (d *deadLetter) publish(ctx context.Context, msg jetstream.Msg, id, tenant, reason string, failures int64) (cut bool, err error) {
	subjTenant := tenant
	if subjTenant == "" {
		subjTenant = tenantpkg.Invalid
	}
	subj := d.template.Render(subjTenant)
	own := func(h nats.Header, reason string) {
		if h.Get(header.Subject) == "" {
			h.Set(header.Subject, msg.Subject())
		}
		h.Set(header.Reason, truncate(oneLine(reason), maxReasonBytes))
		h.Set(header.JobID, id)
		if tenant != "" {
			h.Set(header.Tenant, tenant)
		}
		if failures > 0 {
			h.Set(header.Failures, strconv.FormatInt(failures, 10))
		}
		h.Set(jetstream.MsgIDHeader, "dlq:"+id)
	}
	whole := &nats.Msg{Subject: subj, Data: msg.Data(), Header: nats.Header{}}
	header.Copy(whole.Header, msg.Headers())
	own(whole.Header, reason)
	limit := header.MaxPayload(d.js)
	err = header.Fits(whole, limit)
	if err == nil {
		if _, err = d.js.PublishMsg(ctx, whole); err == nil {
			return false, nil
		}
	}
	if !header.TooLarge(err) {
		return false, fmt.Errorf("dead-letter to %s: %w", subj, err)
	}

	// Cut to fit: the job's own headers go, and its data as far as needed.
	data := msg.Data()
	where := "the original is not kept"
	if meta, merr := msg.Metadata(); merr == nil {
		where = fmt.Sprintf("the original stays readable in stream %s at sequence %d until the stream's limits drop it", meta.Stream, meta.Sequence.Stream)
	}
	cutMsg := &nats.Msg{Subject: subj, Header: nats.Header{}}
	if s := msg.Headers().Get(header.Subject); s != "" {
		cutMsg.Header.Set(header.Subject, s)
	}
	own(cutMsg.Header, fmt.Sprintf("%s; the dead letter is cut to fit (%v); %s", truncate(reason, maxReasonBytes/2), err, where))
	cutMsg.Header.Set(header.DataBytes, strconv.Itoa(len(data)))
	room := len(data)
	if limit > 0 {
		room = int(max(0, limit-int64(header.Bytes(cutMsg.Header))-128))
	}
	for _, keep := range []int{min(len(data), room), 0} {
		cutMsg.Data = data[:keep]
		cutMsg.Header.Set(header.Truncated, fmt.Sprintf("%d of %d bytes", keep, len(data)))
		if err = header.Fits(cutMsg, limit); err == nil {
			if _, err = d.js.PublishMsg(ctx, cutMsg); err == nil {
				return true, nil
			}
		}
		if !header.TooLarge(err) {
			break
		}
	}
	return true, fmt.Errorf("dead-letter to %s, cut to fit: %w", subj, err)
}

// take marks a job to be dead-lettered after its group (it.bad): one the
// throttle found invalid (throttle.ErrInvalid), or one over a calendar
// window that refuses, not defers, the jobs over it (window:N/UNIT:dlq),
// uncharged.
func (d *deadLetter) take(_ *groupActs, it *item, res throttle.Result) bool {
	if res.Err != nil {
		it.bad = &badJobError{tenant: it.job.Tenant, reason: res.Err.Error()}
		return true
	}
	it.bad = &badJobError{tenant: it.job.Tenant, reason: fmt.Sprintf("over %s: the window resets at %s",
		res.Binding, d.cfg.Now().Add(res.Wait).UTC().Format(time.RFC3339))}
	return true
}

// settleAsync dead-letters msg in its own goroutine.
func (d *deadLetter) settleAsync(ctx context.Context, msg jetstream.Msg, id, tenant, reason string, failures int64) {
	d.handlers.Add(1)
	go func() {
		defer d.handlers.Done()
		d.settle(ctx, msg, id, tenant, reason, failures)
	}()
}

// settle publishes msg to the dead-letter subject, then terminates
// it, and reports whether it did. If the publish fails the message is
// handed back with a delay, never terminated, so nothing is lost.
func (d *deadLetter) settle(ctx context.Context, msg jetstream.Msg, id, tenant, reason string, failures int64) bool {
	if id == "" {
		if meta, err := msg.Metadata(); err == nil {
			id = fmt.Sprintf("%s:%d", meta.Stream, meta.Sequence.Stream)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	cut, err := d.publish(pctx, msg, id, tenant, reason, failures)
	cancel()
	if err != nil {
		// Back off as for a failing handler, by the message's deliveries,
		// so that a dead-letter stream that refuses for long (full, say)
		// is not asked again every RetryInitial.
		delay := d.cfg.RetryInitial
		if meta, merr := msg.Metadata(); merr == nil {
			delay = d.cfg.retryDelay(int64(max(1, meta.NumDelivered)))
		}
		d.log.Error("dead-letter publish failed; handing the job back", "job", id, "retry_in", delay, "err", err)
		if nerr := msg.NakWithDelay(delay); nerr != nil {
			d.log.Warn("hand back failed; JetStream redelivers after AckWait", "job", id, "err", nerr)
		}
		return false
	}
	d.rec.deadLettered(tenant, cut)
	d.log.Warn("job dead-lettered", "job", id, "tenant", tenant, "reason", reason, "cut_to_fit", cut)
	term := msg.Term
	if d.cfg.TermWithReason {
		term = func() error { return msg.TermWithReason(truncate(reason, 256)) }
	}
	if err := term(); err != nil {
		d.log.Warn("term failed; JetStream redelivers after AckWait and the dead letter is deduplicated", "job", id, "err", err)
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

// oneLine makes s safe as a header value: line breaks become spaces.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
}

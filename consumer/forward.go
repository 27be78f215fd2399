package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/subject"
)

// Forwarder returns the Handler behind THROTTLER_HANDLER=forward: it
// publishes the job's data and headers through JetStream to the subject
// template renders for the job's tenant, and waits for the publish ack. The
// publish carries Nats-Msg-Id = the job's id, so a job forwarded twice
// (after a lost ack) is stored once within the stream's duplicate window.
//
// A job that does not fit once its headers are added (over the server's
// max_payload, JetStream's 64 KiB of headers, or the output stream's
// max_msg_size) fails Permanent: it is dead-lettered at once, since no
// retry can make it fit. A publish JetStream cannot store now (unavailable)
// returns a RetryAfter of forwardRetry instead of a failure: the job is
// held and forwarded again, uncounted, for as long as the outage lasts.
func Forwarder(js jetstream.JetStream, template subject.Template) Handler {
	return func(ctx context.Context, job Job) error {
		msg := &nats.Msg{Subject: template.Render(job.Tenant), Data: job.Data, Header: nats.Header{}}
		header.Copy(msg.Header, job.Header)
		msg.Header.Set(header.JobID, job.ID)
		msg.Header.Set(header.Tenant, job.Tenant)
		msg.Header.Set(header.Subject, job.Subject)
		msg.Header.Set(jetstream.MsgIDHeader, job.ID)
		if err := header.Fits(msg, header.MaxPayload(js)); err != nil {
			return Permanent(fmt.Errorf("forward to %s: %w", msg.Subject, err))
		}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			switch {
			case header.TooLarge(err):
				err = Permanent(err)
			case unavailable(err):
				// The output stream cannot take jobs now (no leader, being
				// moved or recreated, a server down): not the job's
				// failure, which would dead-letter it after a long enough
				// outage. Held, uncounted, and tried again.
				return &RetryAfter{After: forwardRetry, Reason: fmt.Sprintf("forward to %s: %v", msg.Subject, err)}
			}
			return fmt.Errorf("forward to %s: %w", msg.Subject, err)
		}
		return nil
	}
}

// forwardRetry is how long a job waits when the output stream cannot take
// it, before it is forwarded again.
const forwardRetry = 2 * time.Second

// storeRefused is the JetStream error code of a stream refusing to store a
// message under its limits (maximum messages, bytes or messages per
// subject, with discard new): the stream is up, and full.
const storeRefused jetstream.ErrorCode = 10077

// unavailable reports whether a publish failed because JetStream could not
// store it now, rather than because of the message: no stream answered
// (none bound the subject, or its leader is gone), the ack timed out, the
// connection is reconnecting, or the server answered 503 (JetStream
// temporarily unavailable). A full stream that refuses new messages is
// not an outage, and fails the job as before.
func unavailable(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected) ||
		(errors.As(err, &api) && api.Code == 503 && api.ErrorCode != storeRefused)
}

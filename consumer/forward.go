package consumer

import (
	"context"
	"fmt"

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
// retry can make it fit.
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
			if header.TooLarge(err) {
				err = Permanent(err)
			}
			return fmt.Errorf("forward to %s: %w", msg.Subject, err)
		}
		return nil
	}
}

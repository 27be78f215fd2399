package consumer

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/subject"
	tenantpkg "github.com/throttler/throttler/tenant"
)

// Forwarder returns the Handler behind THROTTLER_HANDLER=forward: it
// publishes the job's data and headers through JetStream to the subject
// template renders for the job's tenant, and waits for the publish ack. The
// publish carries Nats-Msg-Id = the job's id, so a job forwarded twice
// (after a lost ack) is stored once within the stream's duplicate window.
func Forwarder(js jetstream.JetStream, template subject.Template) Handler {
	return func(ctx context.Context, job Job) error {
		msg := &nats.Msg{Subject: template.Render(job.Tenant), Data: job.Data, Header: nats.Header{}}
		copyHeaders(msg.Header, job.Header)
		msg.Header.Set(HeaderJobID, job.ID)
		msg.Header.Set(HeaderTenant, job.Tenant)
		msg.Header.Set(HeaderSubject, job.Subject)
		msg.Header.Set(jetstream.MsgIDHeader, job.ID)
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			return fmt.Errorf("forward to %s: %w", msg.Subject, err)
		}
		return nil
	}
}

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
	copyHeaders(out.Header, msg.Headers())
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

// copyHeaders copies src into dst, leaving out the headers JetStream acts on
// when publishing (deduplication, expectations, schedules, TTLs), which
// belong to the original publish and not to ours.
func copyHeaders(dst, src nats.Header) {
	for k, vs := range src {
		if strings.HasPrefix(k, "Nats-") {
			continue
		}
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
}

package release

import (
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/subject"
)

// WokenMsg is the message that brings back at once the parked copy of
// job jobID (first stored at sequence seq) of tenant, whose headers h and
// data are given: it goes past the jobs consumer's backlog, on the woken
// jobs' subject (the job's own subject is in its header.Subject), as a new
// incarnation. Its message id makes one publish per parked copy, however
// many wakers call for it.
func WokenMsg(subjects subject.Schedules, tenant, jobID string, seq uint64, h nats.Header, data []byte) *nats.Msg {
	out := &nats.Msg{Subject: subjects.Woken(tenant, seq), Data: data, Header: nats.Header{}}
	header.Copy(out.Header, h)
	out.Header.Del(header.Slot)
	out.Header.Set(header.Woken, "1")
	out.Header.Set(jetstream.MsgIDHeader, "wake:"+jobID+":"+h.Get(header.Deferrals))
	return out
}

package consumer

import (
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/testenv"
)

// quietConsumer is a consumer with nothing to deliver whose pulls last
// until released, as a quiet consumer's pull lasts until its expiry.
type quietConsumer struct {
	jetstream.Consumer // nil: panics on a method the worker should not call
	release            chan struct{}
	pulls              atomic.Int32
}

func (c *quietConsumer) Fetch(int, ...jetstream.FetchOpt) (jetstream.MessageBatch, error) {
	c.pulls.Add(1)
	<-c.release
	return newFakeBatch(nil, nil), nil
}

// quietLane is a fast lane whose copies come from a quiet consumer.
type quietLane struct {
	fakeLane
	copies *quietConsumer
}

func (l *quietLane) Copies() jetstream.Consumer { return l.copies }

// TestQuietSidePullsLeaveTheJobsACredit: with a fetch batch of 1, the
// pulls of the lane's copies and of the woken jobs, each holding a credit
// while it waits for messages that do not come, leave the jobs consumer
// credits of its own: its jobs run.
func TestQuietSidePullsLeaveTheJobsACredit(t *testing.T) {
	e := setup(t)
	copies := &quietConsumer{release: make(chan struct{})}
	woken := &quietConsumer{release: make(chan struct{})}
	t.Cleanup(func() { close(copies.release); close(woken.release) }) // before setup's stop
	e.params.Config.FetchBatch = 1
	e.params.Lane = &quietLane{copies: copies}
	e.params.Woken = woken
	e.start()
	testenv.Eventually(t, waitFor, "both side pulls waiting", func() bool {
		return copies.pulls.Load() == 1 && woken.pulls.Load() == 1
	})
	msgs := []*fakeMsg{newMsg(1, "jobs.acme"), newMsg(2, "jobs.acme"), newMsg(3, "jobs.globex")}
	e.push(msgs...)
	e.waitSettled(msgs...)
	for _, m := range msgs {
		wantSettled(t, m, ack)
	}
}

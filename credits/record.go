// Package credits changes tenants' prepaid balances (the policy term
// credits) the way an operator does: each change is made in Redis, where
// the workers draw on the balance, recorded durably in a JetStream stream,
// and followed by the release of the jobs that waited for it.
package credits

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Record is one operator change of a tenant's balance, as the record
// stream keeps it: what was asked, what the balance was and what it became.
type Record struct {
	// Tenant whose balance changed.
	Tenant string `json:"tenant"`
	// Op is "add" or "set".
	Op string `json:"op"`
	// Amount is what was added, or what the balance was set to.
	Amount int64 `json:"amount"`
	// Before is the balance before the change, and BeforeTrusted whether
	// it could be trusted: an untrusted one (written before Redis last
	// restarted or failed over) was forfeited.
	Before        int64 `json:"before"`
	BeforeTrusted bool  `json:"before_trusted"`
	// BeforeLost says Redis had lost the balance (it restarted empty, or
	// failed over to a replica without it): Before, 0, is not what was
	// left, which cannot be known.
	BeforeLost bool `json:"before_lost,omitempty"`
	// Balance is the balance the change left.
	Balance int64 `json:"balance"`
	// At is when the change was made.
	At time.Time `json:"at"`
}

// OpenRecords returns the record stream name, creating it when missing
// with replicas replicas (the jobs stream's, so that the record is as safe
// as the jobs) and file storage. Its subjects are name.<tenant>; it keeps
// every record: a balance's history is what an operator restores it from.
func OpenRecords(ctx context.Context, js jetstream.JetStream, name string, replicas int) (jetstream.Stream, error) {
	st, err := js.Stream(ctx, name)
	if err == nil {
		return st, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("opening the credits record stream %s: %w", name, err)
	}
	st, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        name,
		Description: "throttler: every change of a tenant's credits (subject: " + name + ".<tenant>; JSON op, amount, before, balance, at)",
		Subjects:    []string{name + ".>"},
		Replicas:    max(1, replicas),
		Storage:     jetstream.FileStorage,
		Duplicates:  time.Minute,
	})
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		st, err = js.Stream(ctx, name) // another caller created it first
	}
	if err != nil {
		return nil, fmt.Errorf("creating the credits record stream %s: %w", name, err)
	}
	return st, nil
}

// subjectOf is the subject of tenant t's records in stream name.
func subjectOf(name, t string) string { return name + "." + t }

// appendRecord stores r in stream name, under id: a retry after a lost
// acknowledgement stores it once.
func appendRecord(ctx context.Context, js jetstream.JetStream, name, id string, r Record) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	m := &nats.Msg{Subject: subjectOf(name, r.Tenant), Data: data, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, id)
	if _, err := js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("recording the change of %s's credits: %w", r.Tenant, err)
	}
	return nil
}

// lastRecord returns tenant t's last record in stream st (named name),
// nil when there is none.
func lastRecord(ctx context.Context, st jetstream.Stream, name, t string) (*Record, error) {
	m, err := st.GetLastMsgForSubject(ctx, subjectOf(name, t))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s's last recorded change of credits: %w", t, err)
	}
	var r Record
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return nil, fmt.Errorf("reading %s's last recorded change of credits: not JSON: %w", t, err)
	}
	return &r, nil
}

// History returns tenant t's records in stream name, oldest first; none
// when the stream does not exist yet.
func History(ctx context.Context, js jetstream.JetStream, name, t string) ([]Record, error) {
	cons, err := js.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subjectOf(name, t)}})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s's credits history: %w", t, err)
	}
	left := int(cons.CachedInfo().NumPending)
	out := make([]Record, 0, left)
	for left > 0 {
		batch, err := cons.Fetch(min(left, 256), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("reading %s's credits history: %w", t, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			left--
			var r Record
			if err := json.Unmarshal(m.Data(), &r); err != nil {
				return nil, fmt.Errorf("reading %s's credits history: a record that is not JSON: %w", t, err)
			}
			out = append(out, r)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, fmt.Errorf("reading %s's credits history: %w", t, err)
		}
		if got == 0 {
			break
		}
	}
	return out, nil
}

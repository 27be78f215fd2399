// Package rollcall lets any process of a fleet list the workers that are
// up: every worker answers a request on its fleet's roll-call subject with
// who it is (Worker), and Gather collects the answers. The admin console's
// fleet page uses it, so that any worker's console shows every worker.
package rollcall

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
)

// Worker is one worker's answer to a roll call.
type Worker struct {
	// ID names the worker process for as long as it runs.
	ID string `json:"id"`
	// Host is the machine's (or the pod's) host name.
	Host string `json:"host"`
	// Version is the worker's build (module version and VCS revision).
	Version string `json:"version"`
	// Started is when the worker process started.
	Started time.Time `json:"started"`
	// Ready is its readiness (/readyz): running, with NATS and Redis
	// answering; Problems say what is not, when not.
	Ready    bool     `json:"ready"`
	Problems []string `json:"problems,omitempty"`
	// Limits fingerprints the limits the worker read from its
	// environment: workers that differ decide some tenants at different
	// rates. Empty from a worker that does not say.
	Limits string `json:"limits,omitempty"`
	// Rules are the tenants' limits the worker read from its environment,
	// as specs: each tenant's by its name, the default's under
	// "_default". While the fleet's workers disagree on them (a rollout
	// that changes them), every worker applies those of the workers
	// started last with them. Empty from a worker that does not say.
	Rules map[string]string `json:"rules,omitempty"`
	// Since is when the worker's configuration (Limits) first ran, as
	// far as it knows: the earliest start of the workers of it that it
	// heard, its own start at the least. Zero from a worker that does
	// not say.
	Since time.Time `json:"since,omitzero"`
	// Seen says, of every configuration (Limits) the worker heard of
	// lately, when it first ran and when a worker of it last answered, as
	// far as the worker knows: what the fleet remembers of a configuration
	// once none of its workers that knew runs. Empty from a worker that
	// does not say.
	Seen map[string]Seen `json:"seen,omitempty"`
}

// Seen is what a worker knows of one configuration of the fleet: when it
// first ran, and when a worker of it last answered a roll call.
type Seen struct {
	Since time.Time `json:"since"`
	Last  time.Time `json:"last"`
}

// ConfigSince is when w's configuration first ran, as far as w knows:
// Since, or its own start when it does not say.
func (w Worker) ConfigSince() time.Time {
	if w.Since.IsZero() || w.Started.Before(w.Since) {
		return w.Started
	}
	return w.Since
}

// Answer answers every request on subj with what self returns, until the
// returned stop is called. self is called once per request, and asked,
// when not nil, with the request's data first: what the asker said of
// itself (Gather's from).
func Answer(nc *nats.Conn, subj string, self func() Worker, asked func(from []byte)) (stop func(), err error) {
	sub, err := nc.Subscribe(subj, func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		if asked != nil {
			asked(m.Data)
		}
		b, err := json.Marshal(self())
		if err != nil {
			return // a Worker always encodes
		}
		_ = m.Respond(b)
	})
	if err != nil {
		return nil, fmt.Errorf("answering roll calls on %s: %w", subj, err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// Gather asks every worker on subj and returns their answers, by host
// then ID. It waits for answers until quiet has passed since the last one
// (the first is awaited up to wait), so a fleet's answers come back in
// little more than one round trip and quiet. from, possibly empty, is
// sent with the request: what the asker says of itself.
func Gather(ctx context.Context, nc *nats.Conn, subj string, from []byte, wait, quiet time.Duration) ([]Worker, error) {

	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	inbox := nc.NewRespInbox()
	ch := make(chan *nats.Msg, 256)
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, fmt.Errorf("roll call: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subj, inbox, from); err != nil {
		return nil, fmt.Errorf("roll call: asking the workers: %w", err)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var out []Worker
	for {
		select {
		case m := <-ch:
			var w Worker
			if err := json.Unmarshal(m.Data, &w); err != nil {
				continue // not a worker's answer
			}
			out = append(out, w)
			timer.Reset(quiet)
			continue
		case <-timer.C:
		case <-ctx.Done():
			if len(out) == 0 && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, ctx.Err()
			}
		}
		break
	}
	slices.SortFunc(out, func(a, b Worker) int { return cmp.Or(cmp.Compare(a.Host, b.Host), cmp.Compare(a.ID, b.ID)) })
	return out, nil
}

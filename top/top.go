// Package top builds the fleet's view of every tenant at once, for
// `throttler top` and the admin API: it asks every worker, over core NATS,
// what it knows of each tenant (consumer.Worker.TopRows), adds the rows
// up and sorts the tenants by their jobs waiting. It scans no stream: the
// workers answer from their own counts.
package top

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
)

// Options say where to ask and what to keep.
type Options struct {
	// Subject is the workers' top subject (app.TopSubject). Required.
	Subject string
	// N is how many tenants to keep, the most waiting first. Defaults to
	// 20; negative keeps all.
	N int
	// Wait bounds the whole gathering. Defaults to 1.5s.
	Wait time.Duration
	// Quiet is how long after the last complete reply no new worker must
	// answer for the gathering to end early. Defaults to 200ms.
	Quiet time.Duration
}

// View is the fleet's tenants at one moment.
type View struct {
	At time.Time `json:"at"`
	// Workers counts the workers that answered in full.
	Workers int `json:"workers"`
	// Tenants counts the tenants any worker knows something of.
	Tenants int `json:"tenants"`
	// More counts the tenants left out of Rows.
	More int `json:"more"`
	// Rows are the N tenants with the most jobs waiting (then the highest
	// deferral rate, then by name), each the sum of every worker's row
	// (OldestWait: the longest; Binding: the busiest worker's).
	Rows []Row `json:"rows"`
}

// statusHeader and noResponders are the header and status NATS answers a
// request with when nothing subscribes to its subject (nats.go reads them
// so for Request, and keeps the names unexported).
const (
	statusHeader = "Status"
	noResponders = "503"
)

// ErrNoWorkers says no worker answered.
var ErrNoWorkers = errors.New("no worker answered: is any running, with the same THROTTLER_STREAM and THROTTLER_CONSUMER?")

// Gather asks every worker and merges their answers.
func Gather(ctx context.Context, nc *nats.Conn, o Options) (View, error) {
	if o.Subject == "" {
		return View{}, errors.New("top: no subject")
	}
	o.N = cmp.Or(o.N, 20)
	o.Wait = cmp.Or(o.Wait, 1500*time.Millisecond)
	o.Quiet = cmp.Or(o.Quiet, 200*time.Millisecond)
	ctx, cancel := context.WithTimeout(ctx, o.Wait)
	defer cancel()
	inbox := nc.NewRespInbox()
	ch := make(chan *nats.Msg, 1024)
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return View{}, fmt.Errorf("top: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.PublishRequest(o.Subject, inbox, nil); err != nil {
		return View{}, fmt.Errorf("top: asking the workers: %w", err)
	}
	if err := nc.FlushWithContext(ctx); err != nil {
		return View{}, fmt.Errorf("top: asking the workers: %w", err)
	}
	quiet := time.NewTimer(o.Wait)
	defer quiet.Stop()
	parts := map[string]int{} // worker → parts received
	done := map[string]bool{}
	byTenant := map[string]*merged{}
	var badErr error
gather:
	for {
		select {
		case m := <-ch:
			if len(m.Data) == 0 && m.Header.Get(statusHeader) == noResponders {
				// NATS's answer to a request nobody subscribes to: no
				// worker listens, so none will answer.
				return View{}, ErrNoWorkers
			}
			r, err := DecodeReply(m.Data)
			if err != nil {
				badErr = err
				continue
			}
			parts[r.Worker]++
			for _, row := range r.Rows {
				add(byTenant, row)
			}
			if r.Parts != 0 && parts[r.Worker] == r.Parts {
				done[r.Worker] = true // its last message, none missed
			}
			if len(done) == len(parts) {
				quiet.Reset(o.Quiet) // every worker that began has finished
			} else {
				quiet.Reset(o.Wait)
			}
		case <-quiet.C:
			break gather
		case <-ctx.Done():
			break gather // the wait is over, or the caller gave up
		}
	}
	if len(done) == 0 {
		if badErr != nil {
			return View{}, fmt.Errorf("top: %w", badErr)
		}
		return View{}, ErrNoWorkers
	}
	return view(byTenant, len(done), o.N), nil
}

// merged is a tenant's rows added up.
type merged struct {
	row  Row
	busy float64 // the deferral rate of the worker Binding came from
	// waits is the longest wait the workers gave of jobs not parked (or,
	// from a worker that sends no runs, of all its jobs); runs are every
	// worker's runs of parked and woken jobs.
	waits float64
	runs  []ParkedRun
}

// add adds one worker's row of a tenant.
func add(by map[string]*merged, r Row) {
	m, ok := by[r.Tenant]
	if !ok {
		m = &merged{row: r, busy: r.Deferred}
		m.row.Runs = nil
		by[r.Tenant] = m
	} else {
		m.row.Admitted += r.Admitted
		m.row.Deferred += r.Deferred
		m.row.Naked += r.Naked
		m.row.Moved += r.Moved
		m.row.Parked += r.Parked
		m.row.Paused += r.Paused
		m.row.DeadLetters += r.DeadLetters
		if r.Binding != "" && (m.row.Binding == "" || r.Deferred > m.busy) {
			m.row.Binding, m.busy = r.Binding, r.Deferred
		}
	}
	if r.Runs != nil {
		m.waits = max(m.waits, r.UnparkedWait)
		m.runs = append(m.runs, r.Runs...)
	} else {
		m.waits = max(m.waits, r.OldestWait)
	}
}

// oldestWait is the longest wait of the tenant's jobs still waiting: of
// those not parked, as the workers said; of the parked, their runs net of
// the jobs woken early, wherever those came back, taken off the oldest
// runs first, since parked jobs are woken in their order. A worker's own
// OldestWait cannot say it: the jobs it parked may have come back to
// another worker.
func (m *merged) oldestWait() float64 {
	w := m.waits
	var woken int64
	parked := make([]ParkedRun, 0, len(m.runs))
	for _, p := range m.runs {
		switch {
		case p.N < 0:
			woken -= p.N
		case p.N > 0:
			parked = append(parked, p)
		}
	}
	slices.SortFunc(parked, func(a, b ParkedRun) int { return cmp.Compare(b.Wait, a.Wait) })
	for _, p := range parked {
		if woken >= p.N {
			woken -= p.N
			continue
		}
		return max(w, p.Wait.Seconds())
	}
	return w
}

// view sorts the merged tenants and keeps the first n.
func view(by map[string]*merged, workers, n int) View {
	rows := make([]Row, 0, len(by))
	for _, m := range by {
		r := m.row
		// A worker's negative count (jobs others parked, woken here) is
		// only part of a sum: a sum below 0 means a parker left.
		r.Naked, r.Moved, r.Parked, r.Paused = max(0, r.Naked), max(0, r.Moved), max(0, r.Parked), max(0, r.Paused)
		r.OldestWait = 0
		if r.Waiting() > 0 {
			r.OldestWait = m.oldestWait()
		}
		if len(m.runs) > 0 && r.Waiting() == 0 && r.Admitted == 0 && r.Deferred == 0 && r.DeadLetters == 0 {
			// Parked jobs all woken, counted off by other workers than
			// their parkers', who keep their runs until the parked jobs'
			// fallback: nothing to show, as a worker forgets a tenant
			// with nothing.
			continue
		}
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b Row) int {
		return cmp.Or(cmp.Compare(b.Waiting(), a.Waiting()), cmp.Compare(b.Deferred, a.Deferred), cmp.Compare(a.Tenant, b.Tenant))
	})
	v := View{At: time.Now().UTC(), Workers: workers, Tenants: len(rows)}
	if n >= 0 && len(rows) > n {
		v.More = len(rows) - n
		rows = rows[:n]
	}
	v.Rows = rows
	return v
}

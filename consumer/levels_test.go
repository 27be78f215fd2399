package consumer

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

// fakePoker answers each Poke with the waiters of its next answer, and
// records the levels poked.
type fakePoker struct {
	mu        sync.Mutex
	answers   [][]throttle.Waiter
	poked     [][]throttle.Level
	forfeited []throttle.Waiter
}

func (p *fakePoker) Poke(_ context.Context, levels []throttle.Level) ([]throttle.Waiter, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.poked = append(p.poked, levels)
	if len(p.answers) == 0 {
		return nil, nil
	}
	w := p.answers[0]
	p.answers = p.answers[1:]
	return w, nil
}

func (p *fakePoker) NoteQueuing(context.Context, []throttle.Level) error { return nil }

func (p *fakePoker) Queuing(context.Context) ([]throttle.Level, error) { return nil, nil }

func (p *fakePoker) Forfeit(_ context.Context, w throttle.Waiter) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.forfeited = append(p.forfeited, w)
	return nil
}

func (p *fakePoker) levels() [][]throttle.Level {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.poked)
}

// A job a shared level queues is parked for ParkFor with the level in its
// reason and counted by level; the worker then pokes that level, wakes
// the jobs its pokes call and those the decision called, and gives back
// the turn of one whose parked copy is gone.
func TestQueuedJobIsParkedAndItsLevelPoked(t *testing.T) {
	e := setup(t)
	deferrer := &fakeDeferrer{}
	poker := &fakePoker{answers: [][]throttle.Waiter{{{Tenant: "acme", JobID: "JOBS:7"}}}}
	waker := &fakeWaker{parked: map[string]bool{"JOBS:7": true, "JOBS:8": true}} // JOBS:9's copy is gone
	e.params.Deferrer, e.params.Levels, e.params.Waker = deferrer, poker, waker
	e.params.Config.ParkFor = 90 * time.Second
	e.decider.decide = func(context.Context, throttle.Copy) throttle.Result {
		return throttle.Result{Decision: throttle.Decision{Outcome: throttle.Queued, LevelName: "group.org-1", Ahead: 3},
			Called: []throttle.Waiter{{Tenant: "globex", JobID: "JOBS:8"}, {Tenant: "globex", JobID: "JOBS:9", Level: "group.org-1", Cost: 1}}}
	}
	e.start()
	m := newMsg(5, "jobs.acme")
	e.push(m)
	e.waitSettled(m)
	testenv.Eventually(t, 5*time.Second, "the called jobs woken", func() bool { return len(waker.woken()) == 3 })
	testenv.Eventually(t, 5*time.Second, "the turn of the job without a copy given back", func() bool {
		poker.mu.Lock()
		defer poker.mu.Unlock()
		return len(poker.forfeited) == 1 && poker.forfeited[0].JobID == "JOBS:9"
	})
	e.stop()

	ds := deferrer.deferred()
	if len(ds) != 1 || !ds[0].Park || ds[0].Wait != 90*time.Second || ds[0].Reason != header.WaitTurn+"group.org-1" {
		t.Fatalf("deferrals %+v, want one parked for 90s, waiting for a turn under group.org-1", ds)
	}
	if got := e.w.Levels()["group.org-1"]; got.Queued != 1 {
		t.Errorf("level counts %+v, want 1 queued", got)
	}
	poked := poker.levels()
	if len(poked) == 0 || !slices.Equal(poked[0], []throttle.Level{{Group: "org-1"}}) {
		t.Errorf("poked %v, want group org-1", poked)
	}
	if got := e.ran.ids(); len(got) != 0 {
		t.Errorf("handled %v, want nothing", got)
	}
}

package consumer

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/testenv"
)

// readLoopEnv runs a worker's group reader on msgs, as the deciding loop
// does, with the loop's side (ready, groups, gate) in the test's hands.
type readLoopEnv struct {
	t      *testing.T
	msgs   chan jetstream.Msg
	ready  chan struct{}
	groups chan decidedGroup
	gate   *readGate
	w      *Worker
}

func newReadLoopEnv(t *testing.T) *readLoopEnv {
	t.Helper()
	w, err := New(setup(t).params)
	if err != nil {
		t.Fatal(err)
	}
	return &readLoopEnv{t: t, msgs: make(chan jetstream.Msg, 16), ready: make(chan struct{}, 1),
		groups: make(chan decidedGroup, 1), gate: &readGate{opened: make(chan struct{}, 1)}, w: w}
}

// start runs the reader until the test ends: then msgs is closed and the
// reader must close groups.
func (e *readLoopEnv) start() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.w.decider.readLoop(ctx, e.msgs, e.gate, e.ready, e.groups)
	}()
	e.t.Cleanup(func() {
		cancel()
		close(e.msgs)
		for range e.groups { // the reader closes it once msgs is closed
		}
		<-done
	})
}

// taken waits until the reader has taken every message sent to msgs.
func (e *readLoopEnv) taken(what string) {
	e.t.Helper()
	testenv.Eventually(e.t, waitFor, what, func() bool { return len(e.msgs) == 0 })
}

// ask asks for the next group, as the deciding loop does, and returns the
// stream sequences of its jobs.
func (e *readLoopEnv) ask() []uint64 {
	e.t.Helper()
	e.ready <- struct{}{}
	select {
	case g := <-e.groups:
		var seqs []uint64
		for _, it := range g.items {
			seqs = append(seqs, it.job.Sequence)
		}
		return seqs
	case <-time.After(waitFor):
		e.t.Fatal("no group handed over")
		return nil
	}
}

// TestReadLoopGroupsWhatArrivesUntilAsked: a group holds every message
// that arrived before the deciding loop asked for it, however many times
// they arrived, in order; what arrives after it was handed over goes to the
// next group.
func TestReadLoopGroupsWhatArrivesUntilAsked(t *testing.T) {
	e := newReadLoopEnv(t)
	for seq := uint64(1); seq <= 3; seq++ {
		e.msgs <- newMsg(seq, "jobs.acme")
	}
	e.start()
	e.taken("the first three taken")
	for seq := uint64(4); seq <= 8; seq++ {
		e.msgs <- newMsg(seq, "jobs.globex")
	}
	e.taken("five more taken")
	if got := e.ask(); !slices.Equal(got, []uint64{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Fatalf("first group %v, want jobs 1 to 8", got)
	}
	e.msgs <- newMsg(9, "jobs.acme")
	e.msgs <- newMsg(10, "jobs.acme")
	e.taken("two more taken")
	if got := e.ask(); !slices.Equal(got, []uint64{9, 10}) {
		t.Fatalf("second group %v, want jobs 9 and 10", got)
	}
}

// TestReadLoopTakesNothingWhileTheLoopRests: while the deciding loop rests
// (its gate closed) the reader leaves the pulled messages waiting, though
// it still takes a job the short wait hands back at its slot; once the
// gate opens it takes them.
func TestReadLoopTakesNothingWhileTheLoopRests(t *testing.T) {
	e := newReadLoopEnv(t)
	e.gate.closed.Store(true)
	e.msgs <- newMsg(1, "jobs.acme")
	e.msgs <- newMsg(2, "jobs.acme")
	e.start()
	if !e.w.decider.short.keep(newMsg(3, "jobs.globex"), time.Millisecond) {
		t.Fatal("the short wait refused a job")
	}
	if got := e.ask(); !slices.Equal(got, []uint64{3}) {
		t.Fatalf("group while resting %v, want only job 3 from the short wait", got)
	}
	if n := len(e.msgs); n != 2 {
		t.Fatalf("%d pulled messages left while resting, want both", n)
	}
	e.gate.rest(context.Background(), 0)
	e.taken("both taken once the gate opened")
	if got := e.ask(); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("group after the rest %v, want jobs 1 and 2", got)
	}
}

package consumer

import (
	"context"
	"strings"
	"testing"
	"time"
)

// jobsOf returns queued jobs named by tenant letter and number, "a1 a2 b1".
func jobsOf(names string) []queued {
	var out []queued
	for _, f := range strings.Fields(names) {
		out = append(out, queued{job: Job{Tenant: f[:1], ID: f}})
	}
	return out
}

// popN pops n jobs and returns their names.
func popN(t *testing.T, q *runQueue, n int) string {
	t.Helper()
	var got []string
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		j, ok := q.pop(ctx)
		cancel()
		if !ok {
			t.Fatalf("pop after %v: nothing", got)
		}
		got = append(got, j.job.ID)
	}
	return strings.Join(got, " ")
}

func TestRunQueueTenantsTakeTurns(t *testing.T) {
	q := newRunQueue()
	// A flood's group with one job of another tenant at its end: that job
	// runs second, not fifth.
	q.push(jobsOf("a1 a2 a3 a4 b1"))
	if got := popN(t, q, 1); got != "a1" {
		t.Fatalf("first pop %q, want a1", got)
	}
	// A later group: c joins the turns behind b and a; a's new job waits
	// behind its older ones.
	q.push(jobsOf("c1 a5"))
	if got, want := popN(t, q, 6), "b1 a2 c1 a3 a4 a5"; got != want {
		t.Errorf("order %q, want %q", got, want)
	}
	q.push(jobsOf("b2 b3 a6"))
	if got, want := popN(t, q, 3), "b2 a6 b3"; got != want {
		t.Errorf("order %q, want %q", got, want)
	}
}

func TestRunQueueWaitsAndCloses(t *testing.T) {
	q := newRunQueue()
	got := make(chan string, 1)
	go func() {
		j, ok := q.pop(context.Background())
		if !ok {
			got <- "closed"
			return
		}
		got <- j.job.ID
	}()
	select {
	case g := <-got:
		t.Fatalf("pop returned %q from an empty queue", g)
	case <-time.After(50 * time.Millisecond):
	}
	q.push(jobsOf("a1"))
	if g := <-got; g != "a1" {
		t.Fatalf("waiting pop got %q, want a1", g)
	}

	// Jobs pushed before close are still handed out; then pop reports the end.
	q.push(jobsOf("a2 b1"))
	q.close()
	if g := popN(t, q, 2); g != "a2 b1" {
		t.Errorf("after close: %q, want a2 b1", g)
	}
	if j, ok := q.pop(context.Background()); ok {
		t.Errorf("pop on a closed, empty queue gave %q", j.job.ID)
	}

	// A pop waiting on an open queue gives up with its context.
	open := newRunQueue()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, ok := open.pop(ctx); ok {
		t.Error("pop on an empty queue returned a job")
	}
}

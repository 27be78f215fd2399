package rollcall_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/rollcall"
	"github.com/throttler/throttler/internal/testenv"
)

// TestGatherHearsEveryWorker: three workers answer, and a fourth that has
// stopped answering is missing; each answering worker hears what the
// asker said of itself, and the limits each read from its environment
// come back with its answer.
func TestGatherHearsEveryWorker(t *testing.T) {
	t.Parallel()
	srv := testenv.StartNATS(t, "")
	nc := srv.Connect(t)
	const subj = "_THROTTLER.TEST.rollcall"
	var stops []func()
	heard := make(chan string, 8)
	for i := range 4 {
		w := rollcall.Worker{ID: fmt.Sprintf("w%d", i), Host: "h", Version: "v1", Started: time.Unix(100, 0).UTC(), Ready: i != 1,
			Rules: map[string]string{"_default": fmt.Sprintf("%d/s:%d", i+1, i+1)}}
		stop, err := rollcall.Answer(nc, subj, func() rollcall.Worker { return w }, func(from []byte) { heard <- string(from) })
		if err != nil {
			t.Fatal(err)
		}
		stops = append(stops, stop)
	}
	stops[3]()
	t.Cleanup(func() {
		for _, s := range stops[:3] {
			s()
		}
	})
	got, err := rollcall.Gather(context.Background(), nc, subj, []byte("asker"), 2*time.Second, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].ID != "w0" || got[1].ID != "w1" || got[2].ID != "w2" {
		t.Fatalf("Gather = %+v, want w0, w1, w2", got)
	}
	if got[1].Ready || !got[0].Ready || got[0].Version != "v1" || got[2].Rules["_default"] != "3/s:3" {
		t.Fatalf("Gather = %+v: readiness, version or limits lost", got)
	}
	for range 3 {
		if from := <-heard; from != "asker" {
			t.Errorf("a worker heard the asker say %q, want asker", from)
		}
	}
}

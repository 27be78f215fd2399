package integration

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/internal/testenv"
)

// TestForwardOutageHoldsJobs: while the output stream cannot store a
// forwarded job (here deleted: a stream without a leader answers no one
// either), the job is held and forwarded again, not counted as a handler
// failure, so that an outage longer than the retries dead-letters nothing:
// with THROTTLER_MAX_FAILURES=2, none is dead-lettered, and once the stream
// is back every job is stored in it, once.
func TestForwardOutageHoldsJobs(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	cfg := e.config(map[string]string{"THROTTLER_MAX_FAILURES": "2"})
	e.ensureStream(cfg)
	w := e.startWorker(cfg, nil)
	e.waitBuilt(w)
	dlq := e.collect("dlq.*")
	name, err := e.js.StreamNameBySubject(ctx, "done.acme")
	must(t, err, "the output stream")
	out, err := e.js.Stream(ctx, name)
	must(t, err, "the output stream")
	outCfg := out.CachedInfo().Config
	must(t, e.js.DeleteStream(ctx, name), "delete the output stream")

	const jobs = 5
	want := e.publishJobs(cfg.Stream, "jobs.acme.a", nil, jobs)
	// Each job tried at least three times: past THROTTLER_MAX_FAILURES, had
	// each try counted.
	testenv.Eventually(t, 30*time.Second, "every job held three times", func() bool { return w.stats()["acme"].DownstreamHolds >= 3*jobs })
	if n := len(dlq.all()); n != 0 {
		t.Fatalf("%d jobs dead-lettered while the output stream was gone, want none", n)
	}
	if s := w.stats()["acme"]; s.Failed != 0 {
		t.Fatalf("%d handler failures counted for an output stream that was gone, want none", s.Failed)
	}

	_, err = e.js.CreateStream(ctx, outCfg)
	must(t, err, "create the output stream again")
	testenv.Eventually(t, 30*time.Second, "every job stored in the output stream", func() bool {
		info, err := out.Info(ctx)
		return err == nil && info.State.Msgs == jobs
	})
	cons, err := e.js.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{})
	must(t, err, "read the output stream")
	batch, err := cons.Fetch(jobs, jetstream.FetchMaxWait(5*time.Second))
	must(t, err, "read the output stream")
	for m := range batch.Messages() {
		id := m.Headers().Get(header.JobID)
		if !want[id] {
			t.Fatalf("job %q stored twice, or unknown", id)
		}
		delete(want, id)
	}
	if len(want) != 0 || len(dlq.all()) != 0 {
		t.Fatalf("jobs %v not forwarded, %d dead-lettered", want, len(dlq.all()))
	}
}

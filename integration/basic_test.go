package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/throttler/throttler/internal/testenv"
)

// TestForwardsAdmittedJobs: jobs under the limit are forwarded once each,
// with their id for deduplication.
func TestForwardsAdmittedJobs(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "1000/s"})
	e.ensureStream(cfg)
	w := e.startWorker(cfg, nil)
	out := e.collect("done.*")
	want := map[string]bool{}
	for i := 0; i < 50; i++ {
		seq := e.publish("jobs.acme", nil, []byte("x"))
		want[jobID("JOBS", seq)] = true
	}
	got := out.waitCount(t, 50, 20*time.Second)
	for _, m := range got {
		if !want[m.jobID] {
			t.Fatalf("unexpected or duplicate forward %q", m.jobID)
		}
		delete(want, m.jobID)
		if m.subject != "done.acme" || m.tenant != "acme" {
			t.Fatalf("forwarded to %s tenant %q, want done.acme", m.subject, m.tenant)
		}
	}
	// Every pulled message was acted on: none is left to be kept alive.
	if n := w.held(); n != 0 {
		t.Errorf("the worker still holds %d pulled messages after forwarding every job", n)
	}
}

// TestMetricsEndpoint: with THROTTLER_METRICS_ADDR set, /healthz answers and
// /metrics shows per-tenant counters that follow the jobs.
func TestMetricsEndpoint(t *testing.T) {
	e := setup(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "1000/s", "THROTTLER_METRICS_ADDR": addr})
	e.ensureStream(cfg)
	e.startWorker(cfg, nil)
	out := e.collect("done.*")
	for i := 0; i < 3; i++ {
		e.publish("jobs.acme", nil, []byte("x"))
	}
	out.waitCount(t, 3, 20*time.Second)
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		must(t, err, "GET %s", path)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		must(t, err, "read %s", path)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		return string(body)
	}
	if got := get("/healthz"); !strings.Contains(got, "ok") {
		t.Errorf("/healthz = %q", got)
	}
	testenv.Eventually(t, 5*time.Second, "metrics to count the jobs", func() bool {
		return strings.Contains(get("/metrics"), `throttler_completed_total{tenant="acme"} 3`)
	})
	if m := get("/metrics"); !strings.Contains(m, `throttler_admitted_total{tenant="acme"} 3`) || !strings.Contains(m, "# TYPE throttler_completed_total counter") ||
		!strings.Contains(m, "\nthrottler_held_jobs 0\n") {
		t.Errorf("/metrics lacks the admitted counter, a TYPE line or held jobs back at 0:\n%s", m)
	}
}

// TestNATSRestartMidRun: the NATS server is restarted (same store) while
// jobs flow and are throttled. The worker reconnects by itself and every
// job is forwarded exactly once, none lost. (A restarted server forgets the
// NAK delays of pending jobs and redelivers them after AckWait, hence the
// short AckWait here.)
func TestNATSRestartMidRun(t *testing.T) {
	countsOnly(t)
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "100/s:10", "THROTTLER_ACK_WAIT": "3s"})
	e.ensureStream(cfg)
	e.startWorker(cfg, nil)
	e.waitStream(cfg.Stream)

	ids := map[string]bool{}
	publish := func(n int) {
		for i := 0; i < n; i++ {
			ids[jobID(cfg.Stream, e.publish("jobs.acme", nil, []byte("x")))] = true
		}
	}
	publish(150) // 1.5 s of work at 100/s: many jobs are deferred when NATS goes
	e.nats.Restart(t)
	testenv.Eventually(t, 10*time.Second, "the test client to reconnect", e.nc.IsConnected)
	// A restarted server may take a while to serve JetStream again on two
	// busy cores: each job is published until stored, its message id
	// making a retry after a lost ack store it once.
	for i := range 50 {
		msg := &nats.Msg{Subject: "jobs.acme", Data: []byte("x"), Header: nats.Header{jetstream.MsgIDHeader: {fmt.Sprint("after-restart-", i)}}}
		var seq uint64
		testenv.Eventually(t, 30*time.Second, "JetStream to store a job after the restart", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			ack, err := e.js.PublishMsg(ctx, msg)
			if err == nil {
				seq = ack.Sequence
			}
			return err == nil
		})
		ids[jobID(cfg.Stream, seq)] = true
	}

	out := e.collect("done.*")
	got := out.waitCount(t, len(ids), 60*time.Second)
	seen := map[string]bool{}
	for _, m := range got {
		if seen[m.jobID] {
			t.Errorf("job %s forwarded twice", m.jobID)
		}
		seen[m.jobID] = true
		if !ids[m.jobID] {
			t.Errorf("forwarded job %s was never published", m.jobID)
		}
	}
}

// TestConsumerDeletedMidRun: an operator deletes the workers' consumer (or
// the whole jobs stream) while they run. The worker notices at its next
// pull, sets them up again and goes on: jobs published afterwards run. (A
// recreated stream numbers its messages from 1 again, so their ids repeat
// those of the deleted stream's jobs and the output stream deduplicates the
// forward of JOBS:1: jobs are counted where they run, not as forwards.)
func TestConsumerDeletedMidRun(t *testing.T) {
	for _, what := range []string{"consumer", "stream"} {
		t.Run(what, func(t *testing.T) {
			e := setup(t)
			cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "1000/s"})
			e.ensureStream(cfg)
			w := e.startWorker(cfg, nil)
			completed := func() bool { return w.stats()["acme"].Completed >= 1 }
			e.waitStream(cfg.Stream)
			e.publish("jobs.acme", nil, []byte("x"))
			testenv.Eventually(t, 10*time.Second, "the first job", completed)

			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if what == "consumer" {
				must(t, e.js.DeleteConsumer(ctx, cfg.Stream, cfg.Consumer), "delete consumer")
			} else {
				must(t, e.js.DeleteStream(ctx, cfg.Stream), "delete stream")
			}
			// Publish until the stream has taken five jobs again (the first
			// at once when only the consumer went).
			want := 1
			var lastErr error
			defer func() {
				if want < 6 { // Eventually failed the test
					t.Logf("last publish: %v", lastErr)
				}
			}()
			testenv.Eventually(t, 15*time.Second, "the jobs stream to take five jobs again", func() bool {
				pctx, pcancel := context.WithTimeout(context.Background(), time.Second)
				defer pcancel()
				if _, lastErr = e.js.Publish(pctx, "jobs.acme", []byte("x")); lastErr == nil {
					want++
				}
				return want >= 6
			})
			testenv.Eventually(t, 20*time.Second, "the jobs published after the deletion", func() bool {
				return w.stats()["acme"].Completed >= int64(want)
			})
		})
	}
}

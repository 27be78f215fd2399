package integration

import (
	"testing"
	"time"
)

// TestForwardsAdmittedJobs: jobs under the limit are forwarded once each,
// with their id for deduplication.
func TestForwardsAdmittedJobs(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "1000/s"})
	e.ensureStream(cfg)
	e.startWorker(cfg, nil)
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
}

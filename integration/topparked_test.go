package integration

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/testenv"
)

// TestTopOldestWaitOfParkedJobs: two workers, acme capped at running:1
// with jobs of 50 ms, so that most of its jobs are parked and woken, on
// either worker. Once a first batch has run, acme drops out of top; a
// second batch then parked shows its own age as the oldest wait, not the
// first batch's, though the runs the first batch parked are not due back
// for minutes.
func TestTopOldestWaitOfParkedJobs(t *testing.T) {
	e := setup(t)
	srv := newInFlight(50 * time.Millisecond)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	cfg := e.config(map[string]string{
		"THROTTLER_TENANT_LIMITS": "acme=running:1",
		"THROTTLER_HANDLER":       "http",
		"THROTTLER_HTTP_URL":      hs.URL + "/jobs/{tenant}",
	})
	e.ensureStream(cfg)
	e.startWorker(cfg, nil)
	e.startWorker(cfg, nil)
	ctx := context.Background()

	firstAt := time.Now()
	first := e.publishJobs("JOBS", "jobs.acme", nil, 10)
	testenv.Eventually(t, 20*time.Second, "the first batch run", func() bool { _, n := srv.read("acme"); return n >= len(first) })
	testenv.Eventually(t, 20*time.Second, "acme out of top, nothing of it waiting nor done lately, 3 s after the first batch", func() bool {
		r, workers := topRow(ctx, e, cfg, "acme")
		return workers == 2 && r.Tenant == "" && time.Since(firstAt) > 3*time.Second
	})

	published := time.Now()
	second := e.publishJobs("JOBS", "jobs.acme", nil, 10)
	var oldest float64
	var age time.Duration
	testenv.Eventually(t, 10*time.Second, "the second batch parked, in top", func() bool {
		r, _ := topRow(ctx, e, cfg, "acme")
		oldest, age = r.OldestWait, time.Since(published)
		return r.Parked > 0
	})
	// The first batch was published over 3 s before: its age would show.
	if max := age.Seconds() + 0.25; oldest > max {
		t.Errorf("top's oldest wait is %.3fs, over the %.3fs the second batch has waited: the first batch's parked jobs, all run, still count", oldest, age.Seconds())
	}
	testenv.Eventually(t, 20*time.Second, "the second batch run", func() bool {
		_, n := srv.read("acme")
		return n >= len(first)+len(second)
	})
}

package integration

import (
	"context"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/ops"
	"github.com/throttler/throttler/internal/testenv"
)

// TestTopMovedMatchesStream: with two workers draining one tenant's
// backlog, the moved jobs top counts stay close to the copies in the
// stream (what a purge's dry run counts exactly), never more than the
// jobs there are, and drop to none soon after the last comes back.
func TestTopMovedMatchesStream(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_TENANT_LIMITS": "gamma=20/s:20"})
	s := &starts{at: map[string][]time.Time{}, runs: map[string]int{}}
	w1 := e.startWorker(cfg, s.handler)
	w2 := e.startWorker(cfg, s.handler)
	e.waitBuilt(w1)
	e.waitBuilt(w2)
	ctx := context.Background()
	fleet := cfg.Fleet(e.js)

	const jobs = 400
	e.publishJobs(cfg.Stream, "jobs.gamma", nil, jobs)
	// The stream's count is read before and after top's, so that top's
	// is judged against what the stream held while top answered.
	dry := func() ops.PurgeReport {
		rep, err := ops.PurgeTenant(ctx, fleet, ops.PurgeOptions{Tenant: "gamma", DryRun: true})
		must(t, err, "dry run")
		return rep
	}
	var worst float64
	samples := 0
	for s.count("gamma") < jobs-40 {
		before := dry()
		row, workers := topRow(ctx, e, cfg, "gamma")
		after := dry()
		lo, hi := min(before.Moved, after.Moved), max(before.Moved, after.Moved)
		t.Logf("top moved %d, stream moved %d to %d (in flight %d), ran %d", row.Moved, before.Moved, after.Moved, after.InFlight, s.count("gamma"))
		if workers == 2 && lo >= 50 {
			samples++
			off := max(0, float64(lo)-float64(row.Moved), float64(row.Moved)-float64(hi))
			worst = max(worst, off/float64(lo))
		}
		time.Sleep(300 * time.Millisecond)
	}
	st1, st2 := w1.stats()["gamma"], w2.stats()["gamma"]
	t.Logf("moves: %d + %d; top off the stream by %.0f%% at worst over %d samples", st1.Moved, st2.Moved, 100*worst, samples)
	if samples < 5 || worst > 0.15 {
		t.Errorf("top's moved count was off the stream's by %.0f%% at worst over %d samples, want at most 15%% over 5 or more", 100*worst, samples)
	}
	testenv.Eventually(t, 30*time.Second, "every gamma job run", func() bool { return s.count("gamma") == jobs })
	last := time.Now()
	testenv.Eventually(t, 10*time.Second, "top showing no gamma job moved", func() bool {
		row, _ := topRow(ctx, e, cfg, "gamma")
		return row.Moved == 0
	})
	if d := time.Since(last); d > 3*time.Second {
		t.Errorf("top still counted moved jobs %s after the last ran, want at most 3s", d)
	}
}

package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/internal/testenv"
)

// TestWorkerResumesSoonAfterALongRedisOutage: a worker whose decisions
// Redis failed for 16 s (its backoff would otherwise have grown past
// 10 s) decides again within a few seconds of Redis answering: a job
// published just after runs within 5 s, and so do the jobs it put off
// during the outage.
func TestWorkerResumesSoonAfterALongRedisOutage(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFER": "nak", "THROTTLER_REDIS_TIMEOUT": "300ms"})
	var mu sync.Mutex
	ran := map[string]time.Time{}
	handler := func(_ context.Context, job consumer.Job) error {
		mu.Lock()
		defer mu.Unlock()
		ran[job.ID] = time.Now()
		return nil
	}
	e.startWorker(cfg, handler)
	e.waitStream(cfg.Stream)
	ranAt := func(id string) (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		at, ok := ran[id]
		return at, ok
	}
	first := jobID(cfg.Stream, e.publish("jobs.acme", nil, []byte("before")))
	testenv.Eventually(t, 10*time.Second, "a job run before the outage", func() bool { _, ok := ranAt(first); return ok })

	e.redis.Stop(t)
	var during []string
	for end := time.Now().Add(16 * time.Second); time.Now().Before(end); {
		// Jobs keep coming, so the worker keeps trying and backing off.
		during = append(during, jobID(cfg.Stream, e.publish("jobs.acme", nil, []byte("during"))))
		time.Sleep(500 * time.Millisecond)
	}
	e.redis.Start(t)
	back := time.Now()
	after := jobID(cfg.Stream, e.publish("jobs.acme", nil, []byte("after")))
	testenv.Eventually(t, 30*time.Second, "every job run", func() bool {
		for _, id := range append(during, after) {
			if _, ok := ranAt(id); !ok {
				return false
			}
		}
		return true
	})
	if at, _ := ranAt(after); at.Sub(back) > 5*time.Second {
		t.Errorf("the job published as Redis came back ran %v later, want within 5 s", at.Sub(back).Round(time.Millisecond))
	}
	var latest time.Duration
	for _, id := range during {
		at, _ := ranAt(id)
		latest = max(latest, at.Sub(back))
		if at.Sub(back) > 5*time.Second {
			t.Errorf("job %s, put off during the outage, ran %v after Redis came back, want within 5 s", id, at.Sub(back).Round(time.Millisecond))
		}
	}
	t.Logf("the jobs put off during the outage ran within %v of Redis answering", latest.Round(time.Millisecond))
}

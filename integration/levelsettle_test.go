package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/internal/testenv"
)

// TestSettleCostChargesTheGlobalLevel: under a global 10/s:1 (the tenants'
// own limits far above it), a job charged 1 whose handler reports a cost
// of 21 leaves the global level 20 tokens in debt: another tenant's job
// published after the settle starts about 2 s later, not at once.
func TestSettleCostChargesTheGlobalLevel(t *testing.T) {
	e := setup(t)
	var mu sync.Mutex
	starts := map[string]time.Time{}
	var settledAt time.Time
	handler := func(ctx context.Context, job consumer.Job) error {
		mu.Lock()
		defer mu.Unlock()
		starts[job.Tenant] = time.Now()
		if job.Tenant == "acme" {
			if err := consumer.SettleCost(ctx, 21); err != nil {
				t.Errorf("SettleCost: %v", err)
			}
			settledAt = time.Now()
		}
		return nil
	}
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "1000/s", "THROTTLER_GLOBAL_LIMIT": "10/s:1"})
	e.ensureStream(cfg)
	w := e.startWorker(cfg, handler)
	e.publish("jobs.acme", nil, []byte("big"))
	w.waitCompleted(t, "acme", 1)
	testenv.Eventually(t, 10*time.Second, "acme's debt of 20 settled", func() bool {
		return w.stats()["acme"].SettledCharged == 20
	})
	e.publish("jobs.globex", nil, []byte("small"))
	w.waitCompleted(t, "globex", 1)
	mu.Lock()
	defer mu.Unlock()
	// 20 tokens owed at 10/s: 2 s, less what the level refilled between
	// acme's admission and the settle (a few ms).
	if gap := starts["globex"].Sub(settledAt); gap < 1800*time.Millisecond || gap > 5*time.Second {
		t.Fatalf("globex's job started %s after acme's settle, want about 2s", gap)
	}
}

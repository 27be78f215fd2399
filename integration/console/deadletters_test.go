package console

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/internal/testenv"
)

// TestReplayFromThePage: a job whose handler refused it is dead-lettered;
// replayed from the dead letters' page, after a confirmation that states
// the count, it runs once, and its dead letter is gone.
func TestReplayFromThePage(t *testing.T) {
	var refuse atomic.Bool
	refuse.Store(true)
	var mu sync.Mutex
	ran := map[string]int{}
	f := setupWith(t, nil, func(_ context.Context, j consumer.Job) error {
		if refuse.Load() {
			return consumer.Permanent(errors.New("endpoint refused the job"))
		}
		mu.Lock()
		ran[string(j.Data)]++
		mu.Unlock()
		return nil
	})
	if _, err := f.js.Publish(context.Background(), "jobs.acme", []byte("order-42")); err != nil {
		t.Fatal(err)
	}
	var list []struct {
		ID uint64 `json:"id"`
	}
	testenv.Eventually(t, 15*time.Second, "the job dead-lettered", func() bool {
		return f.get(f.url, "/api/v1/dlq", &list) == 200 && len(list) == 1
	})
	refuse.Store(false)
	ctx := browser(t, "Bearer "+token)
	id := itoa(int(list[0].ID))
	do(t, ctx, 15*time.Second, "opening the dead letter",
		chromedp.Navigate(f.url+"/#/dlq/"+id),
		waitJS(`document.getElementById('dl-data')?.textContent === 'order-42'`))
	if h := text(t, ctx, "#dl-headers"); !strings.Contains(h, "endpoint refused the job") {
		t.Errorf("the dead letter's headers %q lack its reason", h)
	}
	do(t, ctx, 15*time.Second, "replaying it from the list",
		chromedp.Navigate(f.url+"/#/dlq"),
		waitJS(`document.getElementById('pick-`+id+`') !== null`),
		chromedp.Click(chromedp.CSS("#pick-"+id)),
		chromedp.Click(chromedp.CSS("#dlq-replay")),
		waitJS(`document.getElementById('confirm').open && document.getElementById('confirm-text').textContent === 'Replay 1 dead letter?'`),
		chromedp.Click(chromedp.CSS("#confirm-ok")),
		waitJS(`document.getElementById('dlq-list').textContent.includes('No dead letters')`))
	testenv.Eventually(t, 15*time.Second, "the replayed job runs", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ran["order-42"] >= 1
	})
	// Once: the replay stored one copy, and nothing else is in flight.
	testenv.Eventually(t, 10*time.Second, "the jobs consumer idle", func() bool {
		ci, err := f.js.Consumer(context.Background(), f.cfg.Stream, f.cfg.Consumer)
		if err != nil {
			return false
		}
		info, err := ci.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if ran["order-42"] != 1 {
		t.Fatalf("the replayed job ran %d times, want once", ran["order-42"])
	}
}

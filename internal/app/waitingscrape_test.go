package app

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestWaitingCountedForTheScrape: a scrape whose counts are older than
// scrapeFresh counts afresh, without waiting for the census: it serves
// what the servers hold at that moment; a scrape right after serves those
// counts again without counting; one a second later counts again.
func TestWaitingCountedForTheScrape(t *testing.T) {
	e := newWaitingEnv(t, 20, 50, 7, 3, true)
	ctx := context.Background()
	e.b.tick(ctx) // b reports its 3 jobs in hand and counts
	e.a.tick(ctx) // a reports its 5 and notes acme's cap
	copies, calls := 50, 0
	e.a.copies = func(context.Context) (int, error) { calls++; return copies, nil }
	// The census' counts (b's, before a's report) are a second old.
	e.clock.advance(time.Second)
	got, ok := e.a.served()
	want := map[string]int64{waitingNak: 20 - 8, waitingScheduled: 50 - 7 - 3, waitingParked: 7, waitingQueued: 3}
	if !ok || calls != 1 {
		t.Fatalf("served %v, %v after %d counts; want one count", got, ok, calls)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	copies = 60
	if got, _ := e.a.served(); calls != 1 || got[waitingScheduled] != 40 {
		t.Errorf("a scrape right after: %v after %d counts; want the same counts, not counted again", got, calls)
	}
	e.clock.advance(time.Second)
	if got, _ := e.a.served(); calls != 2 || got[waitingScheduled] != 50 {
		t.Errorf("a scrape a second later: %v after %d counts; want counted again, 50 scheduled", got, calls)
	}
	// a parks 2 jobs of zeta (moved copies too) since its last tick: the
	// scrape notes zeta and counts them as parked, not as scheduled.
	for i := range 2 {
		if err := e.rdb.ZAdd(ctx, "w:{zeta}:w", redis.Z{Score: float64(i), Member: fmt.Sprintf("z%d", i)}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	e.a.parkedUnder = func(time.Time) []string { return []string{"acme", "zeta"} }
	e.clock.advance(time.Second)
	if got, _ := e.a.served(); got[waitingParked] != 7+2 || got[waitingScheduled] != 60-9-3 {
		t.Errorf("a scrape after zeta parked: %v; want 9 parked, 48 scheduled", got)
	}
}

package admin

import (
	"context"
	"sync"
	"testing"
	"time"
)

// countingTenants is a Tenants whose every view carries its number.
type countingTenants struct {
	mu sync.Mutex
	n  int
}

func (c *countingTenants) Top(context.Context) (TopView, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return TopView{Workers: c.n}, nil
}

// A view a little old is served at once while the next is gathered; one
// older than staleAfter intervals (nobody asked for minutes) is not: the
// request waits for a fresh view.
func TestTopCacheServesNoStaleView(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	c := newTopCache(&countingTenants{}, time.Second, clock)
	ctx := context.Background()
	if v, err := c.get(ctx); err != nil || v.Workers != 1 {
		t.Fatalf("first view %+v, %v; want the first gathered", v, err)
	}
	advance(1500 * time.Millisecond)
	if v, _ := c.get(ctx); v.Workers != 1 {
		t.Fatalf("a view 1.5 intervals old: got view %d, want the cached one served at once", v.Workers)
	}
	// Let the background gathering the last call started end.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		busy := c.gathering != nil
		c.mu.Unlock()
		if !busy || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	advance(10 * time.Minute)
	if v, _ := c.get(ctx); v.Workers != 3 {
		t.Fatalf("a view 10 minutes old: got view %d, want a fresh one (3)", v.Workers)
	}
}

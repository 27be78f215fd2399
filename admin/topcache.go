package admin

import (
	"context"
	"sync"
	"time"
)

// topCache keeps the last fleet view for every viewer: gathering it asks
// every worker for every tenant, so however many pages are open, each
// worker answers at most once an interval. A view older than the interval
// is served while a newer one is gathered in the background, so a page's
// refresh never waits for the workers but the first; a view older than
// staleAfter intervals (nobody asked for a while) is not served: the
// request waits for a new one, as the first does. Safe for concurrent
// use.
type topCache struct {
	src   Tenants
	every time.Duration
	now   func() time.Time

	mu        sync.Mutex
	view      TopView
	err       error
	at        time.Time     // when view (or err) was gathered; zero before
	gathering chan struct{} // closed when the gathering under way ends; nil when none
}

// newTopCache returns a cache of src's view, gathered at most once every.
func newTopCache(src Tenants, every time.Duration, now func() time.Time) *topCache {
	return &topCache{src: src, every: every, now: now}
}

// gatherTimeout bounds one gathering of the fleet view.
const gatherTimeout = 5 * time.Second

// staleAfter is how many intervals old a view may be and still be served
// at once.
const staleAfter = 3

// get returns the latest view: at once when there is one not older than
// staleAfter intervals (starting a new gathering when it is older than
// one), else after the gathering under way, or ctx's end.
func (c *topCache) get(ctx context.Context) (TopView, error) {
	c.mu.Lock()
	age := c.now().Sub(c.at)
	if c.at.IsZero() || age >= c.every {
		c.startLocked()
	}
	if !c.at.IsZero() && age < staleAfter*c.every {
		v, err := c.view, c.err
		c.mu.Unlock()
		return v, err
	}
	done := c.gathering
	c.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return TopView{}, ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.view, c.err
}

// startLocked starts a gathering unless one is under way; c.mu is held.
func (c *topCache) startLocked() {
	if c.gathering != nil {
		return
	}
	done := make(chan struct{})
	c.gathering = done
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), gatherTimeout)
		defer cancel()
		v, err := c.src.Top(ctx)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.view, c.err, c.at, c.gathering = v, err, c.now(), nil
	}()
}

package app

import (
	"context"
	"sync"
	"time"
)

// scrapeFresh is how old the counts of waiting jobs a scrape serves may be:
// older, the scrape counts afresh (served), so that the gauge reads what
// the servers hold when Prometheus reads it, not a second before. Scrapes
// closer together than this (two Prometheus servers) share a count.
const scrapeFresh = 10 * time.Millisecond

// scrapeCountTimeout bounds a count made for a scrape: past it, or when
// it fails, the scrape serves the census' last counts.
const scrapeCountTimeout = 2 * time.Second

// scrapeCount paces the counts made for scrapes as the counter's are
// (paced): a count that takes long is made less often, and the census'
// counts are served meanwhile.
type scrapeCount struct {
	mu      sync.Mutex // one count at a time: a scrape meanwhile waits for it
	counted time.Time
	took    time.Duration
}

// served returns the counts a scrape serves: counted now, when the last
// counts are older than scrapeFresh and a count is due, or else the last
// counts (waiting). A count is a few Redis calls and one stream info, as
// the counter's: made by the worker scraped, it reads the servers as they
// are, the jobs in the other workers' hands as they reported them (a
// second ago at most).
func (c *waitingCounter) served() (map[string]int64, bool) {
	now := c.now()
	c.mu.Lock()
	fresh := c.counts != nil && !c.at.Before(now.Add(-scrapeFresh))
	c.mu.Unlock()
	if !fresh {
		c.scrape.mu.Lock()
		if paced(c.scrape.counted, c.scrape.took, c.every, now) {
			// A Prometheus collector is given no context: the count is
			// bounded by its own timeout instead.
			ctx, cancel := context.WithTimeout(context.Background(), scrapeCountTimeout)
			// This worker's own parks and queues are noted first: a tenant
			// that began parking since the last tick is counted as parked,
			// not as scheduled (the other workers note theirs each tick).
			c.note(ctx, now)
			counts, err := c.tally(ctx, now)
			cancel()
			c.scrape.counted, c.scrape.took = now, c.now().Sub(now)
			switch {
			case err != nil:
				c.log.Debug("counting the waiting jobs for a scrape failed; serving the census' counts", "err", err)
			case counts != nil:
				c.mu.Lock()
				if c.at.Before(now) {
					c.counts, c.at = counts, now
				}
				c.mu.Unlock()
			}
		}
		c.scrape.mu.Unlock()
	}
	return c.waiting()
}

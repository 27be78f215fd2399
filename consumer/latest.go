package consumer

import (
	"sync"
	"time"
)

// latestTimes maps keys (tenants, caps) to the latest time recorded for
// each, forgetting a key once its time has passed. Safe for concurrent
// use; the zero value is ready.
type latestTimes struct {
	mu sync.Mutex
	m  map[string]time.Time
}

// record records t for k, unless k has a later time.
func (l *latestTimes) record(k string, t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]time.Time{}
	}
	if t.After(l.m[k]) {
		l.m[k] = t
	}
}

// after returns k's time if it is after now, and forgets k otherwise.
func (l *latestTimes) after(k string, now time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.m[k]
	if ok && !t.After(now) {
		delete(l.m, k)
		return time.Time{}, false
	}
	return t, ok
}

// since returns the keys whose time is at or after from, and forgets the
// others.
func (l *latestTimes) since(from time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for k, t := range l.m {
		if t.Before(from) {
			delete(l.m, k)
			continue
		}
		out = append(out, k)
	}
	return out
}

// keys returns the keys whose time is at or after from, forgetting none.
func (l *latestTimes) keys(from time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for k, t := range l.m {
		if !t.Before(from) {
			out = append(out, k)
		}
	}
	return out
}

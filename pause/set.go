package pause

import (
	"sync"
	"time"
)

// Set is the pauses a worker applies, as its Watcher last read them. Safe
// for concurrent use; Paused is a map read under a read lock, so it costs
// next to nothing on the worker's path.
type Set struct {
	mu      sync.RWMutex
	tenants map[string]Pause
}

// NewSet returns an empty Set.
func NewSet() *Set { return &Set{tenants: map[string]Pause{}} }

// Paused reports whether tenant t is paused at now, why, and until when
// (zero: until resumed); it implements consumer.Pauser.
func (s *Set) Paused(t string, now time.Time) (reason string, until time.Time, paused bool) {
	p, ok := s.Lookup(t, now)
	return p.Reason, p.Until, ok
}

// Since implements consumer.Pauser: when t's pause in force at now
// began, zero when t is not paused.
func (s *Set) Since(t string, now time.Time) time.Time {
	p, _ := s.Lookup(t, now)
	return p.Since
}

// Lookup returns tenant t's pause and true when t is paused at now.
func (s *Set) Lookup(t string, now time.Time) (Pause, bool) {
	s.mu.RLock()
	p, ok := s.tenants[t]
	s.mu.RUnlock()
	if !ok || !p.Active(now) {
		return Pause{}, false
	}
	return p, true
}

// Ended returns the pauses recorded whose Until has come by now: still in
// the bucket, to be ended (End).
func (s *Set) Ended(now time.Time) []Pause {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []Pause
	for _, p := range s.tenants {
		if !p.Until.IsZero() && !now.Before(p.Until) {
			out = append(out, p)
		}
	}
	return out
}

// Put records p (a tenant's pause; others are ignored).
func (s *Set) Put(p Pause) {
	if p.Tenant == "" {
		return
	}
	s.mu.Lock()
	s.tenants[p.Tenant] = p
	s.mu.Unlock()
}

// Remove forgets tenant t's pause.
func (s *Set) Remove(t string) {
	s.mu.Lock()
	delete(s.tenants, t)
	s.mu.Unlock()
}

// Active returns the tenants paused at now.
func (s *Set) Active(now time.Time) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []string
	for t, p := range s.tenants {
		if p.Active(now) {
			out = append(out, t)
		}
	}
	return out
}

// Len is how many tenants have a pause recorded, ended or not.
func (s *Set) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.tenants)
}

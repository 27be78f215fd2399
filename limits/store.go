// Package limits holds the tenants' live policies: those of the
// environment (THROTTLER_DEFAULT_LIMIT, THROTTLER_TENANT_LIMITS), replaced
// key by key by the values of a NATS key-value bucket that every worker
// watches, so that a tenant's limit changes on every worker within moments
// of a write and without a restart. It holds the live policies of the
// levels above the tenant (the global limit, the groups') the same way,
// from keys of their own (Levels, levels.go).
//
// A key is a tenant, or DefaultKey for every tenant without a policy of its
// own; its value is a spec as throttle.ParsePolicy reads it, in plain text
// ("50/s:100+10000/d"). Which policy applies to a tenant, first found:
// its key in the bucket, its entry in THROTTLER_TENANT_LIMITS, the bucket's
// DefaultKey, THROTTLER_DEFAULT_LIMIT. A value that cannot be read never
// changes anything: the tenant keeps the policy it had.
package limits

import (
	"fmt"
	"strings"
	"sync"

	"github.com/throttler/throttler/tenant"
	"github.com/throttler/throttler/throttle"
)

// DefaultKey is the bucket key whose value replaces THROTTLER_DEFAULT_LIMIT.
const DefaultKey = "_default"

// Spec reads a bucket value, or a spec given on the command line, as the
// worker does: throttle.ParsePolicy with the environment's default burst,
// in shadow mode when shadowAll (THROTTLER_SHADOW) says every tenant is.
func Spec(value string, defaultBurst int64, shadowAll bool) (throttle.Policy, error) {
	p, err := throttle.ParsePolicy(strings.TrimSpace(value), defaultBurst)
	if err != nil {
		return throttle.Policy{}, err
	}
	p.Shadow = p.Shadow || shadowAll
	return p, nil
}

// CheckKey reports whether key can name a tenant's policy: DefaultKey, or
// a tenant as the worker accepts tenants, but throttle.GlobalKey, which is
// the global limit's (LevelKey).
func CheckKey(key string) error {
	if key == DefaultKey {
		return nil
	}
	if key == throttle.GlobalKey {
		return fmt.Errorf("key %q is the global limit's, not a tenant's", key)
	}
	if err := tenant.Validate(key); err != nil {
		return fmt.Errorf("key %q is not a tenant: %w", key, err)
	}
	return nil
}

// maxShared caps the specs a Store remembers to share.
const maxShared = 4096

// Store is a throttle.Policies: the environment's policies, replaced by
// those set from the bucket (Set, Remove; Watch calls them). Safe for
// concurrent use.
type Store struct {
	mu        sync.RWMutex
	env       throttle.Rules              // the environment's policies (SetEnv)
	overrides map[string]*throttle.Policy // tenant → its policy from the bucket
	def       *throttle.Policy            // DefaultKey's policy, or nil
	// shared holds one Policy per spec: tenants on the same plan share it,
	// so an override costs its map entry and little more.
	shared map[string]*throttle.Policy
}

// NewStore returns a Store with the environment's policies env and no
// overrides yet.
func NewStore(env throttle.Rules) *Store {
	return &Store{env: env, overrides: map[string]*throttle.Policy{}, shared: map[string]*throttle.Policy{}}
}

// Policy returns the policy that applies to t now.
func (s *Store) Policy(t string) throttle.Policy {
	s.mu.RLock()
	p, ok := s.overrides[t]
	def, env := s.def, s.env
	s.mu.RUnlock()
	if ok {
		return *p
	}
	return fallback(t, env, def)
}

// Fallback returns the policy that applies to t without a key of its own
// in the bucket.
func (s *Store) Fallback(t string) throttle.Policy {
	s.mu.RLock()
	def, env := s.def, s.env
	s.mu.RUnlock()
	return fallback(t, env, def)
}

// Default returns the policy of tenants under the default: DefaultKey's,
// or THROTTLER_DEFAULT_LIMIT's.
func (s *Store) Default() throttle.Policy {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.def != nil {
		return *s.def
	}
	return s.env.Default
}

// FromDefault reports whether t's policy is DefaultKey's (or
// THROTTLER_DEFAULT_LIMIT): t has no key of its own in the bucket and no
// policy in the environment's list of tenants.
func (s *Store) FromDefault(t string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if _, ok := s.overrides[t]; ok {
		return false
	}
	_, ok := s.env.Tenants[t]
	return !ok
}

// fallback is t's policy from the environment's env, or def (DefaultKey's)
// for a tenant the environment does not list.
func fallback(t string, env throttle.Rules, def *throttle.Policy) throttle.Policy {
	if p, ok := env.Tenants[t]; ok {
		return p
	}
	if def != nil {
		return *def
	}
	return env.Default
}

// SetEnv replaces the environment's policies with env, from the next
// decision on: the fleet's workers agree on one environment while they
// are rolled to another (the caller keeps env unchanged afterwards).
func (s *Store) SetEnv(env throttle.Rules) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.env = env
}

// Set makes p the policy of key (a tenant, or DefaultKey), read from spec.
func (s *Store) Set(key, spec string, p throttle.Policy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	shared, ok := s.shared[spec]
	if !ok {
		if len(s.shared) >= maxShared {
			// Specs that come and go must not pile up: start sharing
			// afresh (the policies in use stay where they are).
			clear(s.shared)
		}
		shared = &p
		s.shared[spec] = shared
	}
	if key == DefaultKey {
		s.def = shared
		return
	}
	s.overrides[key] = shared
}

// Remove gives key's tenant back its policy from the environment (or
// DefaultKey back THROTTLER_DEFAULT_LIMIT).
func (s *Store) Remove(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if key == DefaultKey {
		s.def = nil
		return
	}
	delete(s.overrides, key)
}

// Overrides reports how many tenants have a policy from the bucket.
func (s *Store) Overrides() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.overrides)
}

package limits

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/tenant"
	"github.com/throttler/throttler/throttle"
)

// The levels above the tenant (throttle.Level) share the bucket with the
// tenants: the key throttle.GlobalKey ("_global") holds the global
// limit's spec, and throttle.GroupKeyPrefix and a group ("group.org-1")
// a group's. Neither is ever a tenant's key: "_global" is refused as one
// (CheckKey), and a group key holds a dot, which no tenant does. A level's
// spec holds only what ValidateShared accepts; which policy applies to a
// level, first found: its key in the bucket, then THROTTLER_GLOBAL_LIMIT
// for the global level, or the group's entry in THROTTLER_GROUP_LIMITS,
// then THROTTLER_DEFAULT_GROUP_LIMIT for a group's.

// LevelKey reads key as the key of a level above the tenant: ok is false
// for any other key (a tenant's, DefaultKey), and err says why a key that
// starts as a group's names no group.
func LevelKey(key string) (lvl throttle.Level, ok bool, err error) {
	if key == throttle.GlobalKey {
		return throttle.Global, true, nil
	}
	name, found := strings.CutPrefix(key, throttle.GroupKeyPrefix)
	if !found {
		return throttle.Level{}, false, nil
	}
	if err := tenant.ValidateGroup(name); err != nil {
		return throttle.Level{}, true, fmt.Errorf("key %q names no group: %w", key, err)
	}
	return throttle.Level{Group: name}, true, nil
}

// Levels is a throttle.LevelPolicies: the environment's policies of the
// levels above the tenant, replaced by those set from the bucket (Set,
// Remove; a Watcher with Levels calls them). Safe for concurrent use.
type Levels struct {
	env throttle.LevelRules

	mu     sync.RWMutex
	global *throttle.Policy           // GlobalKey's policy, or nil
	groups map[string]throttle.Policy // group → its policy from the bucket
}

// NewLevels returns Levels with the environment's policies env and no
// overrides yet.
func NewLevels(env throttle.LevelRules) *Levels {
	return &Levels{env: env, groups: map[string]throttle.Policy{}}
}

// Global implements throttle.LevelPolicies.
func (l *Levels) Global() throttle.Policy { return l.Policy(throttle.Global) }

// Group implements throttle.LevelPolicies.
func (l *Levels) Group(name string) throttle.Policy { return l.Policy(throttle.Level{Group: name}) }

// Policy returns the policy that applies to lvl now.
func (l *Levels) Policy(lvl throttle.Level) throttle.Policy {
	l.mu.RLock()
	var p *throttle.Policy
	if lvl.Group == "" {
		p = l.global
	} else if g, ok := l.groups[lvl.Group]; ok {
		p = &g
	}
	l.mu.RUnlock()
	if p != nil {
		return *p
	}
	return l.Fallback(lvl)
}

// Fallback returns the policy that applies to lvl without a key of its
// own in the bucket: the environment's.
func (l *Levels) Fallback(lvl throttle.Level) throttle.Policy {
	if lvl.Group == "" {
		return l.env.Global()
	}
	return l.env.Group(lvl.Group)
}

// Set makes p the policy of lvl.
func (l *Levels) Set(lvl throttle.Level, p throttle.Policy) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lvl.Group == "" {
		l.global = &p
		return
	}
	l.groups[lvl.Group] = p
}

// Remove gives lvl back its policy from the environment.
func (l *Levels) Remove(lvl throttle.Level) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lvl.Group == "" {
		l.global = nil
		return
	}
	delete(l.groups, lvl.Group)
}

// Overrides reports how many levels have a policy from the bucket.
func (l *Levels) Overrides() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	n := len(l.groups)
	if l.global != nil {
		n++
	}
	return n
}

// ResolveLevel reads the policy that applies to lvl, as a Watcher reading
// values with r applies the bucket over env: the level's key, else the
// environment's (its Source names the variable). A key whose newest
// values the workers ignore gives its latest value they read, noted in
// Source.Ignored, as Resolve does for a tenant. kv may be nil (no
// bucket).
func ResolveLevel(ctx context.Context, kv jetstream.KeyValue, env throttle.LevelRules, r Reader, lvl throttle.Level) (Effective, error) {
	var ignored *Ignored
	if kv != nil {
		e, ok, err := fromBucket(ctx, kv, lvl.String(), r)
		if err != nil || ok {
			return e, err
		}
		ignored = e.Source.Ignored
	}
	where := "THROTTLER_GLOBAL_LIMIT"
	if lvl.Group != "" {
		where = "THROTTLER_DEFAULT_GROUP_LIMIT"
		if _, ok := env.Groups[lvl.Group]; ok {
			where = "THROTTLER_GROUP_LIMITS"
		}
	}
	var p throttle.Policy
	if lvl.Group == "" {
		p = env.Global()
	} else {
		p = env.Group(lvl.Group)
	}
	return Effective{Policy: p, Source: Source{Where: where, Ignored: ignored}}, nil
}

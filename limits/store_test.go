package limits

import (
	"fmt"
	"testing"

	"github.com/throttler/throttler/throttle"
)

func TestStorePrecedence(t *testing.T) {
	env := throttle.Rules{
		Default: throttle.Enforce(throttle.PerSecond(100, 100)),
		Tenants: map[string]throttle.Policy{"globex": throttle.Enforce(throttle.PerSecond(5, 5))},
	}
	s := NewStore(env)
	check := func(what, tenant string, want throttle.Policy) {
		t.Helper()
		if got := s.Policy(tenant); got.String() != want.String() {
			t.Fatalf("%s: Policy(%s) = %s, want %s", what, tenant, got, want)
		}
	}
	check("environment's default", "acme", env.Default)
	check("environment's tenant", "globex", env.Tenants["globex"])

	def := throttle.Enforce(throttle.PerSecond(7, 7))
	s.Set(DefaultKey, "7/s", def)
	check("bucket's default", "acme", def)
	check("the environment's tenant over the bucket's default", "globex", env.Tenants["globex"])

	own := throttle.Policy{Limits: throttle.Limits{throttle.PerMinute(1, 1)}, Shadow: true}
	s.Set("acme", "1/m+shadow", own)
	s.Set("globex", "1/m+shadow", own)
	check("bucket's tenant", "acme", own)
	check("bucket's tenant over the environment's", "globex", own)
	if s.Overrides() != 2 {
		t.Fatalf("Overrides() = %d, want 2", s.Overrides())
	}

	s.Remove("globex")
	check("removed: the environment's tenant again", "globex", env.Tenants["globex"])
	s.Remove(DefaultKey)
	check("default removed", "initech", env.Default)
	check("acme keeps its own", "acme", own)
}

// Default is the bucket's default, else the environment's; FromDefault
// holds for a tenant with neither a key of its own nor an environment
// policy.
func TestStoreDefaultAndFromDefault(t *testing.T) {
	env := throttle.Rules{
		Default: throttle.Enforce(throttle.PerSecond(100, 100)),
		Tenants: map[string]throttle.Policy{"globex": throttle.Enforce(throttle.PerSecond(5, 5))},
	}
	s := NewStore(env)
	if got := s.Default(); got.String() != env.Default.String() {
		t.Fatalf("Default() = %s, want the environment's %s", got, env.Default)
	}
	def := throttle.Enforce(throttle.PerSecond(7, 7))
	s.Set(DefaultKey, "7/s", def)
	if got := s.Default(); got.String() != def.String() {
		t.Fatalf("Default() = %s, want the bucket's %s", got, def)
	}
	s.Set("acme", "1/s", throttle.Enforce(throttle.PerSecond(1, 1)))
	for tenant, want := range map[string]bool{"acme": false, "globex": false, "initech": true} {
		if got := s.FromDefault(tenant); got != want {
			t.Fatalf("FromDefault(%s) = %v, want %v", tenant, got, want)
		}
	}
	s.Remove("acme")
	s.Remove(DefaultKey)
	if !s.FromDefault("acme") || s.Default().String() != env.Default.String() {
		t.Fatalf("after removals: FromDefault(acme) = %v, Default() = %s; want true, %s", s.FromDefault("acme"), s.Default(), env.Default)
	}
}

// Tenants with the same spec share one Policy, and the specs remembered
// stay bounded however many come and go.
func TestStoreSharesPolicies(t *testing.T) {
	s := NewStore(throttle.Rules{Default: throttle.Enforce(throttle.PerSecond(1, 1))})
	p := throttle.Enforce(throttle.PerSecond(50, 100))
	s.Set("a", "50/s:100", p)
	s.Set("b", "50/s:100", p)
	if s.overrides["a"] != s.overrides["b"] {
		t.Fatal("two tenants with one spec hold two policies")
	}
	for i := range 3 * maxShared {
		spec := fmt.Sprintf("%d/s", i+1)
		s.Set(fmt.Sprint("t", i), spec, throttle.Enforce(throttle.PerSecond(int64(i+1), 1)))
	}
	if len(s.shared) > maxShared {
		t.Fatalf("%d specs remembered, want at most %d", len(s.shared), maxShared)
	}
	if got := s.Policy("t5").String(); got != "6/s:1" {
		t.Fatalf("t5 = %s after the shared specs were cleared, want 6/s:1", got)
	}
}

func TestSpecAndKey(t *testing.T) {
	p, err := Spec(" 50/s:100+10000/d\n", 0, false)
	if err != nil || p.String() != "50/s:100+10000/d:10000" || p.Shadow {
		t.Fatalf("Spec = %v, %v", p, err)
	}
	if p, err := Spec("5/s", 9, true); err != nil || p.String() != "5/s:9+shadow" {
		t.Fatalf("Spec(5/s, burst 9, shadow all) = %v, %v; want 5/s:9+shadow", p, err)
	}
	for _, bad := range []string{"", "fast", "5/s+5/s", "0/s"} {
		if _, err := Spec(bad, 0, false); err == nil {
			t.Errorf("Spec(%q) accepted", bad)
		}
	}
	for _, key := range []string{DefaultKey, "acme", "a-b_c"} {
		if err := CheckKey(key); err != nil {
			t.Errorf("CheckKey(%q) = %v", key, err)
		}
	}
	for _, key := range []string{"a.b", "a/b", "a=b", ""} {
		if err := CheckKey(key); err == nil {
			t.Errorf("CheckKey(%q) accepted", key)
		}
	}
}

package limits

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

// A level's key is _global or group.NAME, NAME a group; any other key is
// no level's, and _global is no tenant's.
func TestLevelKey(t *testing.T) {
	for key, want := range map[string]throttle.Level{"_global": throttle.Global, "group.org-1": {Group: "org-1"}} {
		if lvl, ok, err := LevelKey(key); !ok || err != nil || lvl != want || lvl.String() != key {
			t.Errorf("LevelKey(%q) = %+v, %v, %v; want %+v", key, lvl, ok, err, want)
		}
	}
	for _, key := range []string{"acme", DefaultKey, "_globals", "groups.x", "global"} {
		if _, ok, err := LevelKey(key); ok || err != nil {
			t.Errorf("LevelKey(%q) = %v, %v; want no level", key, ok, err)
		}
	}
	for _, key := range []string{"group.", "group.a.b", "group.a b"} {
		if _, ok, err := LevelKey(key); !ok || err == nil {
			t.Errorf("LevelKey(%q) = %v, %v; want a group key naming no group", key, ok, err)
		}
	}
	if err := CheckKey("_global"); err == nil {
		t.Error("CheckKey(_global) accepted it as a tenant's key")
	}
}

// A level's value is read as a shared limit: a tenant's terms are refused.
func TestReadLevelValue(t *testing.T) {
	r := Reader{DefaultBurst: 50, ShadowAll: true}
	if p, err := r.Read("_global", " 500/s\n"); err != nil || p.String() != "500/s:50+shadow" {
		t.Fatalf("Read(_global, 500/s) = %v, %v; want 500/s:50+shadow", p, err)
	}
	if p, err := r.Read("group.org-1", "10/s:10+window:1000/d"); err != nil || len(p.Limits) != 2 {
		t.Fatalf("Read(group.org-1) = %v, %v", p, err)
	}
	for key, value := range map[string]string{
		"_global":     "running:2",
		"group.org-1": "5/s+weight:2",
		"group.org-2": "5/s+credits",
		"group.org-3": "fast",
		"group.a.b":   "5/s",
	} {
		if _, err := r.Read(key, value); err == nil {
			t.Errorf("Read(%s, %s) accepted", key, value)
		}
	}
	// A tenant's term alone is refused for it, not for a missing rate.
	for _, value := range []string{"running:2", "weight:2", "credits"} {
		if _, err := r.Read("_global", value); err == nil || !strings.Contains(err.Error(), "a tenant's terms") {
			t.Errorf("Read(_global, %s): %v; want a tenant's terms named", value, err)
		}
	}
}

// The bucket's key replaces the environment's policy of a level; a group
// without either takes the environment's default group policy.
func TestLevelsPrecedence(t *testing.T) {
	env := throttle.LevelRules{
		GlobalPolicy: throttle.Enforce(throttle.PerSecond(500, 500)),
		DefaultGroup: throttle.Enforce(throttle.PerSecond(50, 50)),
		Groups:       map[string]throttle.Policy{"org-1": throttle.Enforce(throttle.PerSecond(100, 100))},
	}
	l := NewLevels(env)
	var _ throttle.LevelPolicies = l
	check := func(what string, got throttle.Policy, want string) {
		t.Helper()
		if got.String() != want {
			t.Fatalf("%s: %q, want %q", what, got, want)
		}
	}
	check("environment's global", l.Global(), "500/s:500")
	check("environment's group", l.Group("org-1"), "100/s:100")
	check("environment's default group", l.Group("org-2"), "50/s:50")
	l.Set(throttle.Global, throttle.Enforce(throttle.PerSecond(7, 7)))
	l.Set(throttle.Level{Group: "org-1"}, throttle.Enforce(throttle.PerSecond(8, 8)))
	l.Set(throttle.Level{Group: "org-2"}, throttle.Enforce(throttle.PerSecond(9, 9)))
	check("bucket's global", l.Global(), "7/s:7")
	check("bucket's group over the environment's", l.Group("org-1"), "8/s:8")
	check("bucket's group over the default", l.Group("org-2"), "9/s:9")
	check("fallback of org-1", l.Fallback(throttle.Level{Group: "org-1"}), "100/s:100")
	if n := l.Overrides(); n != 3 {
		t.Fatalf("Overrides() = %d, want 3", n)
	}
	l.Remove(throttle.Global)
	l.Remove(throttle.Level{Group: "org-1"})
	check("global removed", l.Global(), "500/s:500")
	check("org-1 removed", l.Group("org-1"), "100/s:100")
	check("org-2 keeps its own", l.Group("org-2"), "9/s:9")
	if none := NewLevels(throttle.LevelRules{}); len(none.Global().Limits) != 0 || len(none.Group("x").Limits) != 0 {
		t.Fatal("without any level configured, a level has a limit")
	}
}

// lockedBuffer is a log sink safe for a Watcher's goroutine and the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) contains(s string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Contains(b.buf.String(), s)
}

// A Watcher with Levels applies the bucket's _global and group keys to
// them, never to the tenants' Store; at start, a level whose newest value
// is bad takes its latest good one; a bad value later changes nothing and
// is logged and counted, as a tenant's is; a deleted key gives the level
// back the environment's policy.
func TestWatcherAppliesLevels(t *testing.T) {
	n := testenv.StartNATS(t, "")
	js, err := jetstream.New(n.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := OpenBucket(ctx, js, "limits", 1)
	if err != nil {
		t.Fatal(err)
	}
	put := func(key, value string) {
		t.Helper()
		if _, err := kv.PutString(ctx, key, value); err != nil {
			t.Fatalf("put %s=%s: %v", key, value, err)
		}
	}
	put("_global", "500/s")
	put("group.org-1", "100/s")
	put("group.org-2", "60/s")
	put("group.org-2", "60/s+running:2") // bad: the latest good, 60/s, applies
	put("group.a.b", "5/s")              // a key naming no group
	put("acme", "7/s")

	env := throttle.LevelRules{Groups: map[string]throttle.Policy{"org-1": throttle.Enforce(throttle.PerSecond(1, 1))}}
	store, levels := NewStore(throttle.Rules{Default: throttle.Enforce(throttle.PerSecond(100, 100))}), NewLevels(env)
	var mu sync.Mutex
	bad := map[string]int{}
	logs := &lockedBuffer{}
	w := &Watcher{Store: store, Levels: levels, Bucket: kv, Log: slog.New(slog.NewTextHandler(logs, nil)),
		OnBad: func(key string) { mu.Lock(); bad[key]++; mu.Unlock() }}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(wctx) }()
	defer func() { stop(); <-done }()
	select {
	case <-w.Ready():
	case <-ctx.Done():
		t.Fatal("the watcher never got ready")
	}
	badCount := func(key string) int { mu.Lock(); defer mu.Unlock(); return bad[key] }

	if g, o1, o2 := levels.Global().String(), levels.Group("org-1").String(), levels.Group("org-2").String(); g != "500/s:500" || o1 != "100/s:100" || o2 != "60/s:60" {
		t.Fatalf("levels at start: global %q, org-1 %q, org-2 %q; want 500/s:500, 100/s:100, 60/s:60", g, o1, o2)
	}
	if store.Overrides() != 1 || store.Policy("acme").String() != "7/s:7" {
		t.Fatalf("tenants at start: %d overrides, acme %q; want acme's alone", store.Overrides(), store.Policy("acme"))
	}
	if badCount("group.org-2") != 1 || badCount("group.a.b") != 1 || !logs.contains("the level keeps its limit") {
		t.Fatalf("bad values at start: group.org-2 %d, group.a.b %d; want each counted once and logged", badCount("group.org-2"), badCount("group.a.b"))
	}

	put("_global", "250/s:300")
	testenv.Eventually(t, 10*time.Second, "the new global limit", func() bool { return levels.Global().String() == "250/s:300" })
	put("_global", "250/s+weight:3")
	testenv.Eventually(t, 10*time.Second, "a bad global value counted", func() bool { return badCount("_global") == 1 })
	if g := levels.Global().String(); g != "250/s:300" {
		t.Fatalf("global after a bad value: %q, want it kept at 250/s:300", g)
	}
	if err := kv.Delete(ctx, "group.org-1"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "org-1 back to the environment's", func() bool { return levels.Group("org-1").String() == "1/s:1" })
	if store.Overrides() != 1 {
		t.Fatalf("the tenants' store took level keys: %d overrides, want 1", store.Overrides())
	}
}

// Without Levels, a Watcher passes the levels' keys over: they are
// neither tenants nor bad values.
func TestWatcherWithoutLevels(t *testing.T) {
	n := testenv.StartNATS(t, "")
	js, err := jetstream.New(n.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := OpenBucket(ctx, js, "limits", 1)
	if err != nil {
		t.Fatal(err)
	}
	for key, value := range map[string]string{"_global": "500/s", "group.org-1": "5/s", "group.a.b": "x"} {
		if _, err := kv.PutString(ctx, key, value); err != nil {
			t.Fatal(err)
		}
	}
	store := NewStore(throttle.Rules{Default: throttle.Enforce(throttle.PerSecond(100, 100))})
	var bad []string
	w := &Watcher{Store: store, Bucket: kv, Log: slog.New(slog.DiscardHandler), OnBad: func(key string) { bad = append(bad, key) }}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(wctx) }()
	select {
	case <-w.Ready():
	case <-ctx.Done():
		t.Fatal("the watcher never got ready")
	}
	stop()
	<-done
	if store.Overrides() != 0 || store.Policy("_global").String() != "100/s:100" || len(bad) != 0 {
		t.Fatalf("without Levels: %d tenant overrides, _global %q, bad %v; want the level keys passed over", store.Overrides(), store.Policy("_global"), bad)
	}
}

// ResolveLevel says where a level's policy comes from.
func TestResolveLevel(t *testing.T) {
	n := testenv.StartNATS(t, "")
	js, err := jetstream.New(n.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := OpenBucket(ctx, js, "limits", 1)
	if err != nil {
		t.Fatal(err)
	}
	env := throttle.LevelRules{
		GlobalPolicy: throttle.Enforce(throttle.PerSecond(500, 500)),
		Groups:       map[string]throttle.Policy{"org-1": throttle.Enforce(throttle.PerSecond(100, 100))},
	}
	resolve := func(lvl throttle.Level) Effective {
		t.Helper()
		e, err := ResolveLevel(ctx, kv, env, Reader{}, lvl)
		if err != nil {
			t.Fatalf("ResolveLevel(%s): %v", lvl, err)
		}
		return e
	}
	for lvl, want := range map[throttle.Level]struct{ where, spec string }{
		throttle.Global:  {"THROTTLER_GLOBAL_LIMIT", "500/s:500"},
		{Group: "org-1"}: {"THROTTLER_GROUP_LIMITS", "100/s:100"},
		{Group: "org-2"}: {"THROTTLER_DEFAULT_GROUP_LIMIT", ""},
	} {
		if e := resolve(lvl); e.Source.Where != want.where || e.Policy.String() != want.spec {
			t.Errorf("%s from the environment: %+v, want %s from %s", lvl, e, want.spec, want.where)
		}
	}
	rev, err := kv.PutString(ctx, "group.org-2", "20/s")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.PutString(ctx, "group.org-2", "20/s+running:1"); err != nil {
		t.Fatal(err)
	}
	e := resolve(throttle.Level{Group: "org-2"})
	if e.Source.Where != "bucket" || e.Source.Revision != rev || e.Policy.String() != "20/s:20" || e.Source.Ignored == nil || e.Source.Ignored.Value != "20/s+running:1" {
		t.Fatalf("org-2 from the bucket: %+v, want 20/s:20 at revision %d, its newest value ignored", e, rev)
	}
}

package throttle_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/lua"
	"github.com/throttler/throttler/throttle"
)

// TestLoadedLibraryIsTheSource loads the engine's library into a private
// redis-server and checks that what Redis holds (FUNCTION LIST WITHCODE)
// is exactly lua.Source of the library's version, and that lua.Source is
// exactly lua/'s source files, read from disk, joined in lua.Files' order
// with the version and the bounds put in for their placeholders: no file
// is left out of what Redis runs.
func TestLoadedLibraryIsTheSource(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	l := newLimiter(t, e.rdb, e.prefix, 0, throttle.Limits{throttle.PerSecond(10, 10)})
	if err := l.Load(ctx); err != nil {
		t.Fatalf("Load: %v", err)
	}
	version, ok := strings.CutPrefix(decideFn(), "decide_")
	if !ok {
		t.Fatalf("decide function %q: want decide_<version>", decideFn())
	}
	name := "throttle_" + version
	libs, err := e.rdb.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: name, WithCode: true}).Result()
	if err != nil {
		t.Fatalf("FUNCTION LIST LIBRARYNAME %s WITHCODE: %v", name, err)
	}
	if len(libs) != 1 || libs[0].Name != name {
		t.Fatalf("FUNCTION LIST LIBRARYNAME %s: got %d libraries (%+v), want %s alone", name, len(libs), libs, name)
	}
	want := lua.Source(version)
	if libs[0].Code != want {
		t.Fatalf("Redis holds %d bytes of code for %s, want lua.Source(%q), %d bytes", len(libs[0].Code), name, version, len(want))
	}

	var joined strings.Builder
	for _, f := range lua.Files() {
		text, err := os.ReadFile(filepath.Join("..", "lua", f))
		if err != nil {
			t.Fatalf("reading lua/%s: %v", f, err)
		}
		joined.Write(text)
	}
	fill := strings.NewReplacer(
		lua.Version, version,
		"__MAX_JOBS__", strconv.Itoa(lua.MaxJobs),
		"__MAX_LIMITS__", strconv.Itoa(lua.MaxLimits),
		"__MAX_CHARGES__", strconv.Itoa(lua.MaxCharges),
		"__MAX_RENEW__", strconv.Itoa(lua.MaxRenew),
		"__MAX_SWEEP__", strconv.Itoa(lua.MaxSweep),
		"__MAX_CALLS__", strconv.Itoa(lua.MaxCalls),
		"__MAX_MEMBER__", strconv.Itoa(lua.MaxMember),
		"__MAX_WINDOW__", strconv.Itoa(lua.MaxWindow),
		"__MAX_CALENDAR__", strconv.Itoa(lua.MaxCalendar),
	)
	if got := fill.Replace(joined.String()); want != got {
		t.Fatalf("lua.Source(%q) (%d bytes) is not lua/%v read from disk and joined (%d bytes)", version, len(want), lua.Files(), len(got))
	}
	// Every function the library registers is loaded.
	if n := len(libs[0].Functions); n != 15 {
		t.Fatalf("%s has %d functions, want 15", name, n)
	}
}

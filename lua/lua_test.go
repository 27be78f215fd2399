package lua_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/throttler/throttler/lua"
)

// TestLibraryIsTheFilesJoined checks that Library is exactly the source
// files Files names, read from disk, joined in their order.
func TestLibraryIsTheFilesJoined(t *testing.T) {
	var b strings.Builder
	for _, name := range lua.Files() {
		text, err := os.ReadFile(name)
		if err != nil {
			t.Fatalf("reading %s: %v", name, err)
		}
		if !strings.HasSuffix(string(text), "\n") {
			t.Errorf("%s does not end in a newline: the next file would join its last line", name)
		}
		b.Write(text)
	}
	if lua.Library != b.String() {
		t.Fatalf("Library (%d bytes) is not %v joined (%d bytes)", len(lua.Library), lua.Files(), b.Len())
	}
	if !strings.HasPrefix(lua.Library, "#!lua name=throttle_"+lua.Version+"\n") {
		t.Fatalf("Library does not open with its #!lua line: %.40q", lua.Library)
	}
}

// TestEveryFileIsJoined checks that every *.lua file of the package is in
// Files exactly once, and that Files names no other.
func TestEveryFileIsJoined(t *testing.T) {
	onDisk, err := filepath.Glob("*.lua")
	if err != nil {
		t.Fatalf("listing *.lua: %v", err)
	}
	joined := lua.Files()
	seen := map[string]bool{}
	for _, name := range joined {
		if seen[name] {
			t.Errorf("Files names %s twice", name)
		}
		seen[name] = true
	}
	for _, name := range onDisk {
		if !seen[name] {
			t.Errorf("lua/%s is not in Files: the library leaves it out", name)
		}
	}
	slices.Sort(onDisk)
	if !slices.Equal(onDisk, slices.Sorted(slices.Values(joined))) {
		t.Fatalf("lua/*.lua is %v, Files %v", onDisk, joined)
	}
}

// TestSourceFillsEveryPlaceholder checks that Source leaves none of the
// library's placeholders (__VERSION__, __MAX_JOBS__, ...) in its text.
func TestSourceFillsEveryPlaceholder(t *testing.T) {
	src := lua.Source("v1")
	for _, p := range []string{lua.Version, "__MAX_"} {
		if i := strings.Index(src, p); i >= 0 {
			t.Fatalf("Source left %q in: %q", p, src[max(0, i-40):min(len(src), i+40)])
		}
	}
	if !strings.HasPrefix(src, "#!lua name=throttle_v1\n") {
		t.Fatalf("Source names another library: %.40q", src)
	}
}

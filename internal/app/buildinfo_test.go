package app

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestBuildOf reads the version, the commit (dirty or not) and the Go
// version from build information, and says unknown for what it lacks.
func TestBuildOf(t *testing.T) {
	for _, c := range []struct {
		name string
		bi   debug.BuildInfo
		want Build
	}{
		{"clean checkout", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "false"}}},
			Build{"(devel)", "abc123", "go1.26.8"}},
		{"changed checkout", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}},
			Build{"(devel)", "abc123-dirty", "go1.26.8"}},
		{"go install of a release, no VCS", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.0"}},
			Build{"v1.2.0", "unknown", "go1.26.8"}},
	} {
		if got := buildOf(&c.bi); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// TestMetricsServeBuildInfo checks /metrics carries throttler_build_info
// at 1 with the running binary's Go version.
func TestMetricsServeBuildInfo(t *testing.T) {
	m, err := newMetrics()
	if err != nil {
		t.Fatal(err)
	}
	body := scrape(t, m)
	b := ReadBuild()
	want := `throttler_build_info{commit="` + b.Commit + `",goversion="` + runtime.Version() + `",version="` + b.Version + `"} 1`
	if !strings.Contains(body, want+"\n") {
		t.Fatalf("/metrics lacks %s:\n%s", want, body[:min(len(body), 2000)])
	}
}

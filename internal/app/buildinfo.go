package app

import (
	"runtime"
	"runtime/debug"
)

// Build says which build of the worker runs: `throttler version` prints
// it and /metrics serves it as throttler_build_info.
type Build struct {
	// Version is the module's version ("v1.2.0"), or "(devel)" for a
	// build from a checkout.
	Version string
	// Commit is the VCS revision built, with "-dirty" when the checkout
	// had changes, or "unknown" when the build recorded none (go build
	// -buildvcs=false, or no git at build time).
	Commit string
	// GoVersion is the Go release that built it.
	GoVersion string
}

// ReadBuild returns the running binary's Build, from the information the
// Go toolchain embeds in it.
func ReadBuild() Build {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Build{Version: "unknown", Commit: "unknown", GoVersion: runtime.Version()}
	}
	return buildOf(bi)
}

// buildOf reads a Build from bi.
func buildOf(bi *debug.BuildInfo) Build {
	b := Build{Version: orUnknown(bi.Main.Version), Commit: "unknown", GoVersion: bi.GoVersion}
	if b.GoVersion == "" {
		b.GoVersion = runtime.Version()
	}
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if b.Commit != "unknown" && dirty {
		b.Commit += "-dirty"
	}
	return b
}

// orUnknown returns s, or "unknown" when s is empty.
func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

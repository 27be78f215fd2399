package app

import "runtime/debug"

// Version is the worker's build: the module's version and, when built
// from a checkout, the VCS revision (marked dirty when it had changes).
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev != "" && len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" && v == "(devel)" {
		return rev + dirty
	}
	return v
}

package throttle

import "strings"

// levelTag is the hash tag of a shared level: "{~.global}", or
// "{~.g.<group>}" for a group's. No tenant's tag can be either ('.' is
// no base64url letter, and a plain tenant has no '~'), nor the fleet's.
func levelTag(lv Level) string {
	if lv.Group == "" {
		return "{~.global}"
	}
	return "{~.g." + lv.Group + "}"
}

// levelKeyspace names the keys of the shared levels under a prefix.
type levelKeyspace struct{ prefix string }

// levels returns the keyspace of the shared levels under k's prefix.
func (k keyspace) levels() levelKeyspace { return levelKeyspace{prefix: k.prefix} }

// levelKeySet are a shared level's keys (lua/share.lua, SHARED LEVELS,
// and lua/groups.lua, GROUPS AT THE GLOBAL LEVEL), all under its tag.
type levelKeySet struct {
	tag     string
	list    string // the waiting list
	fair    string // the fair-queue hash
	passes  string // the pass set
	scratch string // where decide writes a reservation it is not asked for
	groups  string // the groups' own order, at the global level
}

// of returns lv's keys.
func (k levelKeyspace) of(lv Level) levelKeySet {
	tag := levelTag(lv)
	base := k.prefix + ":" + tag
	return levelKeySet{tag: tag, list: base + ":lw", fair: base + ":lv", passes: base + ":lp", scratch: base + ":lx", groups: base + ":lg"}
}

// settled returns the key of the marker of a job's cost settled at level
// lv (Decider.Settle), as keyspace.settled is a tenant's.
func (k levelKeyspace) settled(lv Level, jobID string) string {
	return k.prefix + ":" + levelTag(lv) + ":st:" + jobID
}

// listPattern matches the waiting list of every shared level, for SCAN:
// no tenant's key and no fleet key ends so.
func (k levelKeyspace) listPattern() string { return k.prefix + ":{~.*}:lw" }

// ofList reads the level whose waiting list is key.
func (k levelKeyspace) ofList(key string) (Level, bool) {
	inner, ok := strings.CutPrefix(key, k.prefix+":{~.")
	if !ok {
		return Level{}, false
	}
	if inner, ok = strings.CutSuffix(inner, "}:lw"); !ok || strings.ContainsAny(inner, "{}") {
		return Level{}, false
	}
	if inner == "global" {
		return Global, true
	}
	g, ok := strings.CutPrefix(inner, "g.")
	return Level{Group: g}, ok && g != ""
}

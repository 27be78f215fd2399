// Package lua holds the Lua source the throttle engine runs inside Redis,
// embedded into the binary: one Redis Functions library (Redis 7.0 or
// later), whose comment documents each function's KEYS, ARGV and reply.
// Package throttle is the only caller; it names the library's version and
// loads it.
//
// library.lua is one long file on purpose: Redis loads a library as one
// source, and its functions can share the rule functions (the charge, the
// checks, the reads) only within it, so that each rule is written once.
package lua

import _ "embed"

// Library is the source of library.lua: the token-bucket decision, the
// owner claim and release, the failure count, the carry of a bucket to a
// new period, the hold of a tenant, and the running caps' decision and
// leases, as Redis functions. The
// placeholder Version stands, in the library's name and in every function's
// name, for a version the loader puts in.
//
//go:embed library.lua
var Library string

// Version is the placeholder in Library that the loader replaces with the
// library's version.
const Version = "__VERSION__"

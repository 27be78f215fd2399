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

import (
	_ "embed"
	"strconv"
	"strings"
)

// Library is the source of library.lua: the token-bucket decision, the
// owner claim and release, the failure count, the carry of a bucket to a
// new period, the hold of a tenant, and the running caps' decision and
// leases, as Redis functions. The placeholder Version stands, in the
// library's name and in every function's name, for a version the loader
// puts in; each bound's placeholder for the bound's value.
// Source returns it as Redis loads it.
//
//go:embed library.lua
var Library string

// Version is the placeholder in Library that the loader replaces with the
// library's version.
const Version = "__VERSION__"

// The bounds on one function call's work. They are defined here, once:
// Source writes them into the library, whose functions refuse a call
// over them, and package throttle splits larger work into several calls
// of at most these sizes. The slowest call each allows is measured in
// BENCHMARKS.md ("Redis functions' bounds").
const (
	// MaxJobs is the most jobs one decide call decides.
	MaxJobs = 64
	// MaxLimits is the most limits one job (one tenant) has, and the most
	// buckets one hold call moves.
	MaxLimits = 8
	// MaxCharges is the most buckets one decide call charges: its jobs'
	// limits, all counted (64 jobs of one or two limits each, 16 of
	// eight).
	MaxCharges = 128
	// MaxRenew is the most leases one lease call renews.
	MaxRenew = 256
	// MaxSweep is the most expired leases and call placeholders one call
	// drops from a cap's lease set; the rest are dropped by later calls.
	MaxSweep = 256
	// MaxCalls is the most waiting jobs one call hands room to.
	MaxCalls = 64
	// MaxMember is the longest waiting-list member, in bytes: a job id of
	// at most 128 bytes in a tenant's list, and in the fleet's list the
	// job's tenant as its hash tag holds it (at most 1 + 171 bytes: '~'
	// and the base64 of 128 bytes), '/' and the job id.
	MaxMember = 301
)

// Source returns the library as Redis loads it: every bound's placeholder
// (__MAX_JOBS__ for MaxJobs, and so on) replaced by its value, and Version
// by version.
func Source(version string) string {
	return strings.NewReplacer(
		Version, version,
		"__MAX_JOBS__", strconv.Itoa(MaxJobs),
		"__MAX_LIMITS__", strconv.Itoa(MaxLimits),
		"__MAX_CHARGES__", strconv.Itoa(MaxCharges),
		"__MAX_RENEW__", strconv.Itoa(MaxRenew),
		"__MAX_SWEEP__", strconv.Itoa(MaxSweep),
		"__MAX_CALLS__", strconv.Itoa(MaxCalls),
		"__MAX_MEMBER__", strconv.Itoa(MaxMember),
	).Replace(Library)
}

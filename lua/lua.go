// Package lua holds the Lua source the throttle engine runs inside Redis,
// embedded into the binary: one Redis Functions library (Redis 7.0 or
// later), whose comments document each function's KEYS, ARGV and reply.
// Package throttle is the only caller; it names the library's version and
// loads it.
//
// Redis loads a library as one source, and its functions can share the
// rule functions (the charge, the checks, the reads) only within it, so
// that each rule is written once. The source is kept in several files,
// one mechanism each (Files lists them), which Library joins in a fixed
// order: a Lua local function must be defined before the code that calls
// it, so each file comes after those it uses. head.lua opens the library
// and documents what every function shares. decide.lua, at over 400
// lines, is the longest: decide's contract and its general path, one
// sequence over a call's jobs (read, check each slot, charge, write) that
// reads best whole; its bucket and window rules live in the files before
// it.
package lua

import (
	_ "embed"
	"strconv"
	"strings"
)

// The library's source files, one mechanism each; files gives their order.
var (
	//go:embed head.lua
	head string
	//go:embed rules.lua
	rules string
	//go:embed jobs.lua
	jobs string
	//go:embed window.lua
	window string
	//go:embed calendar.lua
	calendar string
	//go:embed one.lua
	one string
	//go:embed many.lua
	many string
	//go:embed decide.lua
	decide string
	//go:embed owners.lua
	owners string
	//go:embed carry.lua
	carry string
	//go:embed hold.lua
	hold string
	//go:embed caps.lua
	caps string
	//go:embed admit.lua
	admit string
	//go:embed lease.lua
	lease string
	//go:embed credits.lua
	credits string
	//go:embed settle.lua
	settle string
	//go:embed groups.lua
	groups string
	//go:embed share.lua
	share string
	//go:embed unqueue.lua
	unqueue string
	//go:embed register.lua
	register string
)

// file is one source file of the library: its name in this directory and
// its text.
type file struct{ name, text string }

// files returns the library's source files in the order Library joins
// them: the head (the library's name, its contract, the constants and
// argument checks), the shared rules, decide's layout, its sliding
// windows, fast paths (one, many) and general path, the owner and failure functions, carry, hold, the running
// caps' sets, admit, lease, the credits (a prepaid balance: its charge,
// refund and operator's operations), the settle of a job's cost after it
// ran, the shared levels (the groups' own order at the global level,
// then share and unshare, and unqueue), and last the registrations, once
// every function they name is defined.
func files() []file {
	return []file{
		{"head.lua", head},
		{"rules.lua", rules},
		{"jobs.lua", jobs},
		{"window.lua", window},
		{"calendar.lua", calendar},
		{"one.lua", one},
		{"many.lua", many},
		{"decide.lua", decide},
		{"owners.lua", owners},
		{"carry.lua", carry},
		{"hold.lua", hold},
		{"caps.lua", caps},
		{"admit.lua", admit},
		{"lease.lua", lease},
		{"credits.lua", credits},
		{"settle.lua", settle},
		{"groups.lua", groups},
		{"share.lua", share},
		{"unqueue.lua", unqueue},
		{"register.lua", register},
	}
}

// Files returns the names of the library's source files, in this
// package's directory, in the order Library joins them.
func Files() []string {
	fs := files()
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.name
	}
	return names
}

// join returns the texts of the library's files, one after the other in
// their order. Each file ends in a newline, so nothing is put between them.
func join() string {
	var b strings.Builder
	for _, f := range files() {
		b.WriteString(f.text)
	}
	return b.String()
}

// Library is the library's source, its files joined in the order of
// Files: the token-bucket decision, the owner claim and release, the
// failure count, the carry of a bucket to a new period, the hold of a
// tenant, the running caps' decision and leases, the credits' charge,
// refund and balance, and the settle of a job's cost, as Redis functions.
// The placeholder Version stands, in the library's name and in every
// function's name, for a version the loader puts in; each bound's
// placeholder for the bound's value. Source returns it as Redis loads it.
var Library = join()

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
	// MaxWindow is the largest N of a sliding window (sliding:N/DURATION):
	// a window keeps each admission in its span, at most N, and one call
	// drops at most MaxWindow admissions that left it.
	MaxWindow = 10000
	// MaxCalendar is the most window starts a calendar window
	// (window:N/UNIT) passes: the windows a job may be placed in, ahead
	// of its earliest slot, are at most MaxCalendar - 2.
	MaxCalendar = 64
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
		"__MAX_WINDOW__", strconv.Itoa(MaxWindow),
		"__MAX_CALENDAR__", strconv.Itoa(MaxCalendar),
	).Replace(Library)
}

// Package lua holds the Lua sources the throttle engine runs inside Redis,
// embedded into the binary. Each script documents its KEYS, ARGV and reply
// above its code; package throttle is the only caller.
package lua

import _ "embed"

// Throttle is the source of throttle.lua: one atomic token-bucket decision
// for one job over up to eight limits, with a reserved slot for a job that
// must wait. See the comment at the top of the file for its contract.
//
//go:embed throttle.lua
var Throttle string

// Failures is the source of failures.lua: count one more handler failure of
// a job, atomically with its TTL.
//
//go:embed failures.lua
var Failures string

// Owner is the source of owner.lua: claim a job's owner record if it has
// none, or give it up if it names a given incarnation.
//
//go:embed owner.lua
var Owner string

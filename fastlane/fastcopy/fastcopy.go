// Package fastcopy is the identity of a fast copy, the message a fast lane
// stores to take a job out of a backlog: the header that marks it and the
// incarnation that names it as the job's owner.
//
// It is a leaf, importing nothing, because two packages must agree on it:
// the lane (package fastlane) makes the copies, and the worker (package
// consumer, which fastlane imports) runs them and settles their originals.
//
// The rule for incarnations, the owner values the throttle records: a
// message other than a fast copy is its stream sequence (Ordinary), and a
// fast copy is 2^52 plus the sequence its original was stored at
// (Incarnation), fixed before the copy exists so that the lane can claim the
// job for it. A stream never reaches 2^52 messages, so the two never meet.
package fastcopy

// Header marks a job's fast copy; its value says how the lane decided the
// job, Admitted or Reserved. Like every header the worker sets, it starts
// with "Throttler-".
const Header = "Throttler-Fast"

// Values of Header.
const (
	// Admitted says the lane admitted the job, and charged it: its copy
	// runs on its first delivery without being decided again.
	Admitted = "admitted"
	// Reserved says the lane reserved the job a slot: its copy is decided
	// as usual and waits for the slot.
	Reserved = "reserved"
)

// base starts the incarnations of fast copies: stream sequences, the
// incarnations of every other message, stay below it.
const base = 1 << 52

// Incarnation is the incarnation of the fast copy of the job first stored
// at stream sequence seq.
func Incarnation(seq uint64) int64 { return int64(base + seq%base) }

// Ordinary is the incarnation of any other message, stored at stream
// sequence seq: the sequence itself, below every fast copy's. The modulo
// only keeps the value in the throttle's range.
func Ordinary(seq uint64) int64 { return int64(seq % base) }

// IsCopy reports whether an owner record names a fast copy.
func IsCopy(owner int64) bool { return owner >= base }

package subject

import (
	"strconv"
	"strings"
)

// Schedules names the subjects under THROTTLER_SCHEDULE_SUBJECT where the
// worker keeps jobs off its consumer. The jobs stream binds them all
// (Schedules.All) and the jobs consumer reads none of them:
//
//	<prefix>.<tenant>.<seq>        the scheduled copy of a moved job
//	<prefix>.b.<tenant>.<id>       a bundle of moved jobs, waiting to fire
//	<prefix>.u.<tenant>.<id>       a fired bundle, to unpack
//	<prefix>.f.<tenant>.<seq>      a job the fast lane took out of a backlog
//	<prefix>.k.<tenant>.<seq>      a job woken in its turn under a running cap
//
// A copy's subject has two tokens after the prefix and the others three,
// so no copy's subject is ever another kind's. seq is the stream sequence
// of the job's first delivery; tenants pass tenant.Validate.
type Schedules string

// Copy is the subject of the scheduled copy of the tenant's job first
// stored at seq. All moves of one job share it, so a new schedule replaces
// the old one.
func (s Schedules) Copy(tenant string, seq uint64) string {
	return string(s) + "." + tenant + "." + strconv.FormatUint(seq, 10)
}

// Bundle is the subject a bundle of the tenant's moved jobs waits on.
func (s Schedules) Bundle(tenant, id string) string { return string(s) + ".b." + tenant + "." + id }

// Unpack is the subject a bundle fires onto, to be unpacked.
func (s Schedules) Unpack(tenant, id string) string { return string(s) + ".u." + tenant + "." + id }

// Fast is the subject of the fast lane's copy of the tenant's job first
// stored at seq.
func (s Schedules) Fast(tenant string, seq uint64) string {
	return string(s) + ".f." + tenant + "." + strconv.FormatUint(seq, 10)
}

// Woken is the subject a parked job of the tenant, first stored at seq,
// is brought back on when its turn under a running cap comes: a consumer
// of its own, so that it passes any backlog of the jobs consumer.
func (s Schedules) Woken(tenant string, seq uint64) string {
	return string(s) + ".k." + tenant + "." + strconv.FormatUint(seq, 10)
}

// All is the pattern of every subject under the prefix.
func (s Schedules) All() string { return string(s) + ".>" }

// Unpacks is the pattern of fired bundles.
func (s Schedules) Unpacks() string { return string(s) + ".u.*.*" }

// Fasts is the pattern of the fast lane's copies.
func (s Schedules) Fasts() string { return string(s) + ".f.*.*" }

// Wokens is the pattern of woken jobs.
func (s Schedules) Wokens() string { return string(s) + ".k.*.*" }

// Kind says which of the subjects above subject is.
type Kind int

// The kinds of subject under a Schedules prefix.
const (
	// Other is a subject that is none of the kinds below.
	Other Kind = iota
	// CopyKind is a scheduled copy of a moved job.
	CopyKind
	// BundleKind is a bundle waiting to fire.
	BundleKind
	// UnpackKind is a fired bundle.
	UnpackKind
	// FastKind is a fast lane copy.
	FastKind
	// WokenKind is a job woken under a running cap.
	WokenKind
)

// Parse says which kind of subject under the prefix subject is, and the
// tenant it names.
func (s Schedules) Parse(subject string) (Kind, string) {
	rest, ok := strings.CutPrefix(subject, string(s)+".")
	if !ok {
		return Other, ""
	}
	tokens := strings.Split(rest, ".")
	switch {
	case len(tokens) == 2:
		return CopyKind, tokens[0]
	case len(tokens) != 3:
		return Other, ""
	case tokens[0] == "b":
		return BundleKind, tokens[1]
	case tokens[0] == "u":
		return UnpackKind, tokens[1]
	case tokens[0] == "f":
		return FastKind, tokens[1]
	case tokens[0] == "k":
		return WokenKind, tokens[1]
	}
	return Other, ""
}

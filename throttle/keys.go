package throttle

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/throttler/throttler/tenant"
)

// DefaultPrefix is the key prefix a Limiter uses when none is given.
const DefaultPrefix = "thr"

// MaxTenantLen is the longest tenant, in bytes, the limiter accepts: the
// one length every part of the worker holds tenants to (tenant.MaxLen).
// Unlike the worker, the limiter takes any other byte: see keyspace.
const MaxTenantLen = tenant.MaxLen

// MaxJobIDLen is the longest job id, in bytes, the limiter accepts.
const MaxJobIDLen = 128

// keyspace builds every Redis key the limiter uses; nothing else
// concatenates keys. All keys of one tenant share the hash tag {tenant}, so
// one script call touches one Redis Cluster slot:
//
//	<prefix>:{<tenant>}:l:<period µs>          state of one limit
//	<prefix>:{<tenant>}:s:<period µs>          state of one limit in shadow mode
//	<prefix>:{<tenant>}:z:<span µs>            admissions of one sliding window
//	<prefix>:{<tenant>}:y:<span µs>            the same in shadow mode
//	<prefix>:{<tenant>}:j:<job id>             slot reserved for one job
//	<prefix>:{<tenant>}:f:<job id>             handler failures of one job
//	<prefix>:{<tenant>}:o:<job id>             incarnation of a moved job that ran
//	<prefix>:{<tenant>}:c                      the tenant's credits (a hash, NO TTL)
//	<prefix>:{<tenant>}:cp:<job id>            credits paid by one job
//	<prefix>:{<tenant>}:st:<job id>            the settle of one job's cost (Limiter.Settle)
//	<prefix>:{<tenant>}:r                      leases of the tenant's running cap
//	<prefix>:{<tenant>}:w                      the cap's waiting list
//	<prefix>:{<tenant>}:p                      places of the waiting jobs it called
//	<prefix>:{~}:r, :w, :p                     the same of the fleet's cap
//	<prefix>:{~}:v                             fair places of the fleet's list
//	<prefix>:{~.global}:..., {~.g.<group>}:...  a shared level (levelKeys)
//
// Every key has a TTL but a tenant's credits: a balance only an operator
// changes must not expire (lua/credits.lua, CREDITS).
//
// A tenant made only of letters, digits, '_', '-' and '.' is used as it is.
// Any other tenant (braces, colons, spaces, control bytes, UTF-8, ...) is
// written as '~' followed by its unpadded base64url encoding. '~' never
// appears in a plain tenant and the encoding has no braces, so no tenant can
// leave its hash tag or collide with another. Empty tenants and tenants
// longer than MaxTenantLen bytes are rejected.
type keyspace struct {
	prefix string
}

// tag returns the hash-tag form of tenant t, "{...}".
func (k keyspace) tag(t string) (string, error) {
	if t == "" {
		return "", &InvalidError{Code: CodeTenant, Detail: "empty tenant"}
	}
	if len(t) > MaxTenantLen {
		return "", &InvalidError{Code: CodeTenant, Detail: fmt.Sprintf("tenant of %d bytes, at most %d allowed", len(t), MaxTenantLen)}
	}
	if plainTenant(t) {
		return "{" + t + "}", nil
	}
	return "{~" + base64.RawURLEncoding.EncodeToString([]byte(t)) + "}", nil
}

// plainTenant reports whether tenant may be used in a key unencoded.
func plainTenant(tenant string) bool {
	for i := 0; i < len(tenant); i++ {
		c := tenant[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-', c == '.':
		default:
			return false
		}
	}
	return true
}

// limitKeySuffix is what follows the tag in the state key of one limit,
// prefix:{tag}:l:PERIOD, or prefix:{tag}:s:PERIOD in shadow mode. The key
// names the period alone, so a limit whose rate or burst changes keeps its
// bucket and what it holds (lua/head.lua, CHANGE); a tenant has one
// limit per period (Limits.Validate).
//
// A sliding window's key is its sorted set of admissions, prefix:{tag}:z:SPAN,
// or prefix:{tag}:y:SPAN in shadow mode: named by its span alone, so that
// a changed N keeps the admissions that count.
func limitKeySuffix(l Limit, shadow bool) string {
	kind := ":l:"
	switch {
	case l.Sliding && shadow:
		kind = ":y:"
	case l.Sliding:
		kind = ":z:"
	case shadow:
		kind = ":s:"
	}
	return kind + strconv.FormatInt(l.periodMicros(), 10)
}

// reservation returns the key of the slot reserved for jobID.
func (k keyspace) reservation(tag, jobID string) string {
	return k.prefix + ":" + tag + ":j:" + jobID
}

// validJobID reports whether id can name a reservation: 1 to MaxJobIDLen
// printable ASCII bytes without spaces.
func validJobID(id string) error {
	if len(id) > MaxJobIDLen {
		return &InvalidError{Code: CodeJobID, Detail: fmt.Sprintf("job id of %d bytes, at most %d allowed", len(id), MaxJobIDLen)}
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return &InvalidError{Code: CodeJobID, Detail: fmt.Sprintf("job id %q has a byte outside printable ASCII", id)}
		}
	}
	return nil
}

// failures returns the key counting handler failures of jobID.
func (k keyspace) failures(tag, jobID string) string {
	return k.prefix + ":" + tag + ":f:" + jobID
}

// owner returns the key naming the incarnation of jobID that was admitted.
func (k keyspace) owner(tag, jobID string) string {
	return k.prefix + ":" + tag + ":o:" + jobID
}

// credits returns the key of the credits (the prepaid balance) of the
// tenant of tag.
func (k keyspace) credits(tag string) string {
	return k.prefix + ":" + tag + ":c"
}

// paid returns the key that says jobID was charged its credits.
func (k keyspace) paid(tag, jobID string) string {
	return k.prefix + ":" + tag + ":cp:" + jobID
}

// settled returns the key that says jobID's cost was settled
// (lua/settle.lua).
func (k keyspace) settled(tag, jobID string) string {
	return k.prefix + ":" + tag + ":st:" + jobID
}

// shift returns the key of the tenant's shift: how far the debts settled
// after its slots were reserved move them (SHIFT, lua/head.lua).
func (k keyspace) shift(tag string) string {
	return k.prefix + ":" + tag + ":sh"
}

// capKeys returns the lease set and waiting list of tenant's cap, or of
// the fleet's when tenant is "" (see fairKey).
func (k keyspace) capKeys(tenant string) (leases, queue string, err error) {
	tag := fleetTag
	if tenant != "" {
		if tag, err = k.tag(tenant); err != nil {
			return "", "", err
		}
	}
	return k.prefix + ":" + tag + ":r", k.prefix + ":" + tag + ":w", nil
}

// capPlaces returns the places hash of tenant's cap, or of the fleet's
// when tenant is "": the places in the waiting list of the jobs called
// (lua/caps.lua, RUNNING CAPS).
func (k keyspace) capPlaces(tenant string) (string, error) {
	tag := fleetTag
	if tenant != "" {
		var err error
		if tag, err = k.tag(tenant); err != nil {
			return "", err
		}
	}
	return k.prefix + ":" + tag + ":p", nil
}

// fairKey is the fair-queue hash of the fleet's waiting list
// (lua/caps.lua, FAIR).
func (k keyspace) fairKey() string { return k.prefix + ":" + fleetTag + ":v" }

// fleetTag is the hash tag of the fleet's cap: no tenant's tag can be it,
// as an encoded tenant is never empty.
const fleetTag = "{~}"

// fleetMember names a tenant's job in the fleet's waiting list.
func (k keyspace) fleetMember(tenant, jobID string) (string, error) {
	tag, err := k.tag(tenant)
	if err != nil {
		return "", err
	}
	return tag[1:len(tag)-1] + "/" + jobID, nil
}

// parseFleetMember reads a member of the fleet's waiting list.
func parseFleetMember(m string) (Waiter, bool) {
	t, id, ok := strings.Cut(m, "/")
	if !ok {
		return Waiter{}, false
	}
	if enc, ok := strings.CutPrefix(t, "~"); ok {
		b, err := base64.RawURLEncoding.DecodeString(enc)
		if err != nil {
			return Waiter{}, false
		}
		t = string(b)
	}
	return Waiter{Tenant: t, JobID: id}, true
}

// calendarSuffix is what follows the tag in the key of calendar window
// lim: its counts by window start, named by unit and zone (not N, so that
// a changed N keeps the count of the current window).
func (l *Limiter) calendarSuffix(lim Limit, shadow bool) string {
	kind := ":c:"
	if shadow {
		kind = ":k:"
	}
	return kind + lim.Unit + "@" + l.zone(lim).String()
}

// calendarArg is the burst argument of calendar window lim at now: 'c'
// ('C' when it dead-letters the jobs over it) and the window starts in µs
// (lua/calendar.lua, CALENDAR).
func (l *Limiter) calendarArg(lim Limit, now time.Time) string {
	var b strings.Builder
	if lim.DeadLetter {
		b.WriteByte('C')
	} else {
		b.WriteByte('c')
	}
	for i, s := range calendarStarts(lim.Unit, l.zone(lim), now, l.horizon) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(s.UnixMicro(), 10))
	}
	return b.String()
}

// termKey returns the key of the state of term lim under tag: a tenant's
// ("{tenant}") or a shared level's (levelTag), in shadow mode or not.
func (l *Limiter) termKey(tag string, lim Limit, shadow bool) string {
	if lim.Unit != "" {
		return l.keys.prefix + ":" + tag + l.calendarSuffix(lim, shadow)
	}
	return l.keys.prefix + ":" + tag + limitKeySuffix(lim, shadow)
}

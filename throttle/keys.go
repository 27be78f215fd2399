package throttle

import (
	"encoding/base64"
	"fmt"
	"strconv"

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
//	<prefix>:{<tenant>}:j:<job id>             slot reserved for one job
//	<prefix>:{<tenant>}:f:<job id>             handler failures of one job
//	<prefix>:{<tenant>}:o:<job id>             incarnation of a moved job that ran
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
func limitKeySuffix(l Limit, shadow bool) string {
	kind := ":l:"
	if shadow {
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

// Package tenant holds the one rule of what a tenant is and where a job's
// tenant comes from. The worker, the configuration and the subjects it
// renders all use it, so a tenant that passes Validate is accepted
// everywhere and is always a valid subject token. A job's group (the
// level above its tenant, an organisation or a plan) follows the same
// rule and is found the same way (ValidateGroup, Source.GroupOf).
package tenant

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
)

// MaxLen is the longest tenant, in bytes.
const MaxLen = 128

// Invalid stands in for the tenant of a job whose tenant is missing or
// invalid: in its dead-letter subject and in metrics. It is itself a valid
// tenant, so a tenant really named "_invalid" shares its series.
const Invalid = "_invalid"

// ErrMissing is wrapped by the errors of a value that is not there: a
// message without the header or the subject token a Source names, or an
// empty value. A job's group may be missing; its tenant may not.
var ErrMissing = errors.New("missing")

// Validate reports whether t can be a tenant: 1 to MaxLen bytes of ASCII
// letters, digits, '_' and '-'. Such a tenant is also a valid subject token
// and is used as it is in Redis hash tags.
func Validate(t string) error { return validate("tenant", t) }

// ValidateGroup reports whether g can be a group: the rule of a tenant,
// so that a group is as safe in keys and subjects.
func ValidateGroup(g string) error { return validate("group", g) }

// validate is Validate of what ("tenant" or "group"), which the errors
// name.
func validate(what, t string) error {
	if t == "" {
		return fmt.Errorf("%w %s: empty", ErrMissing, what)
	}
	if len(t) > MaxLen {
		return fmt.Errorf("oversized %s: %d bytes, at most %d", what, len(t), MaxLen)
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("malformed %s %q: only letters, digits, '_' and '-' are allowed", what, t)
		}
	}
	return nil
}

// Source says where a job's tenant comes from: the header named Header
// when it is set, else the Token-th subject token, counting from 1. The
// zero value takes the tenant from nowhere: every job then lacks one.
type Source struct {
	// Token is the subject token holding the tenant, from 1; used when
	// Header is empty.
	Token int
	// Header is the header holding the tenant.
	Header string
}

// FromSubject returns the Source of the n-th subject token.
func FromSubject(n int) Source { return Source{Token: n} }

// FromHeader returns the Source of the header named name.
func FromHeader(name string) Source { return Source{Header: name} }

// String formats s as THROTTLER_TENANT_FROM reads it: subject:N or
// header:NAME.
func (s Source) String() string {
	if s.Header != "" {
		return "header:" + s.Header
	}
	return "subject:" + strconv.Itoa(s.Token)
}

// Of returns the tenant of a message published to subject with headers h,
// or why it has none that Validate accepts.
func (s Source) Of(subject string, h nats.Header) (string, error) {
	return s.of("tenant", subject, h)
}

// GroupOf returns the group of a message published to subject with
// headers h, or why it has none that ValidateGroup accepts: an error
// wrapping ErrMissing when the message carries no group (no header, no
// such token, an empty value), another when the value is malformed or
// the header is given twice.
func (s Source) GroupOf(subject string, h nats.Header) (string, error) {
	return s.of("group", subject, h)
}

// of is Of of what ("tenant" or "group"), which the errors name.
func (s Source) of(what, subject string, h nats.Header) (string, error) {
	var t string
	if s.Header != "" {
		vals := h.Values(s.Header)
		if len(vals) == 0 {
			return "", fmt.Errorf("%w %s: no %s header", ErrMissing, what, s.Header)
		}
		if len(vals) > 1 {
			return "", fmt.Errorf("malformed %s: %d %s headers", what, len(vals), s.Header)
		}
		t = vals[0]
	} else {
		tokens := strings.Split(subject, ".")
		if s.Token < 1 || s.Token > len(tokens) {
			return "", fmt.Errorf("%w %s: subject %q has no token %d", ErrMissing, what, subject, s.Token)
		}
		t = tokens[s.Token-1]
	}
	if err := validate(what, t); err != nil {
		return "", err
	}
	return t, nil
}

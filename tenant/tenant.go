// Package tenant holds the one rule of what a tenant is and where a job's
// tenant comes from. The worker, the configuration and the subjects it
// renders all use it, so a tenant that passes Validate is accepted
// everywhere and is always a valid subject token.
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

// Validate reports whether t can be a tenant: 1 to MaxLen bytes of ASCII
// letters, digits, '_' and '-'. Such a tenant is also a valid subject token
// and is used as it is in Redis hash tags.
func Validate(t string) error {
	if t == "" {
		return errors.New("missing tenant: empty")
	}
	if len(t) > MaxLen {
		return fmt.Errorf("oversized tenant: %d bytes, at most %d", len(t), MaxLen)
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("malformed tenant %q: only letters, digits, '_' and '-' are allowed", t)
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
	var t string
	if s.Header != "" {
		vals := h.Values(s.Header)
		if len(vals) == 0 {
			return "", fmt.Errorf("missing tenant: no %s header", s.Header)
		}
		if len(vals) > 1 {
			return "", fmt.Errorf("malformed tenant: %d %s headers", len(vals), s.Header)
		}
		t = vals[0]
	} else {
		tokens := strings.Split(subject, ".")
		if s.Token < 1 || s.Token > len(tokens) {
			return "", fmt.Errorf("missing tenant: subject %q has no token %d", subject, s.Token)
		}
		t = tokens[s.Token-1]
	}
	if err := Validate(t); err != nil {
		return "", err
	}
	return t, nil
}

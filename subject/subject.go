// Package subject holds the one grammar of NATS subjects the worker uses:
// checking subjects and patterns, matching them against each other,
// rendering the subject templates of THROTTLER_FORWARD_SUBJECT and
// THROTTLER_DLQ_SUBJECT, and naming the subjects the worker keeps moved
// jobs on. Tokens are separated by "."; in a pattern "*" matches one token
// and a final ">" one or more.
package subject

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// Validate says why s is not a subject, or a pattern when wildcards is
// true: no empty token, no white space or control characters, and "*" and
// ">" only as whole tokens, ">" only last.
func Validate(s string, wildcards bool) error {
	if s == "" {
		return errors.New("empty subject")
	}
	if strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return fmt.Errorf("subject %q contains white space or control characters", s)
	}
	tokens := strings.Split(s, ".")
	for i, t := range tokens {
		switch {
		case t == "":
			return fmt.Errorf("subject %q has an empty token", s)
		case !strings.ContainsAny(t, "*>"):
		case !wildcards:
			return fmt.Errorf("subject %q has a wildcard", s)
		case t != "*" && t != ">":
			return fmt.Errorf("subject %q: * and > must be whole tokens", s)
		case t == ">" && i != len(tokens)-1:
			return fmt.Errorf("subject %q: > must be the last token", s)
		}
	}
	return nil
}

// Covers reports whether every subject that matches pattern b also matches
// pattern a.
func Covers(a, b string) bool {
	p, q := strings.Split(a, "."), strings.Split(b, ".")
	for i, tok := range p {
		if tok == ">" {
			return i == len(p)-1 && len(q) > i
		}
		if i >= len(q) {
			return false
		}
		switch {
		case tok == "*":
			if q[i] == ">" {
				return false
			}
		case tok != q[i]:
			return false
		}
	}
	return len(p) == len(q)
}

// Overlap reports whether some subject matches both a and b. Either may be
// a pattern, and either may be a template, whose {tenant} placeholders
// stand for any non-empty text without a ".". Two tokens that both hold
// placeholders are taken to overlap: it errs on the side of seeing a loop
// where the worker could consume its own output.
func Overlap(a, b string) bool {
	p, q := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(p) && i < len(q); i++ {
		if p[i] == ">" || q[i] == ">" {
			return true
		}
		if !tokensOverlap(p[i], q[i]) {
			return false
		}
	}
	return len(p) == len(q)
}

// tokensOverlap reports whether some token matches both x and y, neither
// of them ">".
func tokensOverlap(x, y string) bool {
	switch {
	case x == "*" || y == "*":
		return true
	case !strings.Contains(x, Placeholder) && !strings.Contains(y, Placeholder):
		return x == y
	case !strings.Contains(y, Placeholder):
		return renders(strings.Split(x, Placeholder), y)
	case !strings.Contains(x, Placeholder):
		return renders(strings.Split(y, Placeholder), x)
	}
	return true
}

// renders reports whether the literal token s can be written as parts
// joined by non-empty texts: whether a template token split at its
// placeholders renders to s for some tenant.
func renders(parts []string, s string) bool {
	if len(parts) == 1 {
		return parts[0] == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	rest := s[len(parts[0]):]
	for i := 1; i <= len(rest); i++ {
		if renders(parts[1:], rest[i:]) {
			return true
		}
	}
	return false
}

// HasToken reports whether every subject matching pattern has an n-th
// token (counting from 1).
func HasToken(pattern string, n int) bool {
	tokens := strings.Split(pattern, ".")
	return n <= len(tokens) || tokens[len(tokens)-1] == ">"
}

package subject

import (
	"fmt"
	"strings"
)

// Placeholder is what a Template replaces with a job's tenant.
const Placeholder = "{tenant}"

// Template is a subject in which every {tenant} stands for a job's tenant,
// such as "done.{tenant}".
type Template string

// ParseTemplate checks s as a Template: braces only in {tenant}, and a
// subject without wildcards once rendered.
func ParseTemplate(s string) (Template, error) {
	rest := s
	for {
		open := strings.IndexAny(rest, "{}")
		if open < 0 {
			break
		}
		if rest[open] == '}' {
			return "", fmt.Errorf("%q has a } without {", s)
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return "", fmt.Errorf("%q has a { without }", s)
		}
		if ph := rest[open : open+end+1]; ph != Placeholder {
			return "", fmt.Errorf("%q has unknown placeholder %s", s, ph)
		}
		rest = rest[open+end+1:]
	}
	if err := Validate(strings.ReplaceAll(s, Placeholder, "t"), false); err != nil {
		return "", err
	}
	return Template(s), nil
}

// Render returns the subject of tenant, which must pass tenant.Validate or
// be tenant.Invalid: such a tenant is a valid subject token, so the result
// is a valid subject.
func (t Template) Render(tenant string) string {
	return strings.ReplaceAll(string(t), Placeholder, tenant)
}

// Pattern is the pattern that matches every subject t renders: each
// {tenant} replaced by "*". Exact for templates whose placeholders fill
// whole tokens, such as "done.{tenant}".
func (t Template) Pattern() string { return t.Render("*") }

// String returns t as written.
func (t Template) String() string { return string(t) }

package tenant

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// matchErr fails t unless err contains want, or is nil when want is "".
func matchErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want != "" && err == nil:
		t.Fatalf("no error, want one containing %q", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Fatalf("error %q, want one containing %q", err, want)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		tenant  string
		wantErr string // substring of the error; "" means valid
	}{
		{name: "lower", tenant: "acme"},
		{name: "mixed", tenant: "Acme_Corp-42"},
		{name: "one letter", tenant: "a"},
		{name: "one digit", tenant: "7"},
		{name: "underscore only", tenant: "_"},
		{name: "dash only", tenant: "-"},
		{name: "Invalid itself", tenant: Invalid},
		{name: "MaxLen bytes", tenant: strings.Repeat("a", MaxLen)},
		{name: "empty", tenant: "", wantErr: "missing tenant"},
		{name: "MaxLen+1 bytes", tenant: strings.Repeat("a", MaxLen+1), wantErr: "oversized tenant"},
		{name: "braces", tenant: "{}", wantErr: "malformed tenant"},
		{name: "hash tag", tenant: "a{b}", wantErr: "malformed tenant"},
		{name: "colon", tenant: "a:b", wantErr: "malformed tenant"},
		{name: "inner space", tenant: "a b", wantErr: "malformed tenant"},
		{name: "leading space", tenant: " a", wantErr: "malformed tenant"},
		{name: "trailing space", tenant: "a ", wantErr: "malformed tenant"},
		{name: "dot", tenant: ".", wantErr: "malformed tenant"},
		{name: "dotted", tenant: "a.b", wantErr: "malformed tenant"},
		{name: "star", tenant: "*", wantErr: "malformed tenant"},
		{name: "gt", tenant: ">", wantErr: "malformed tenant"},
		{name: "slash", tenant: "a/b", wantErr: "malformed tenant"},
		{name: "non-ASCII letter", tenant: "tenánt", wantErr: "malformed tenant"},
		{name: "CJK", tenant: "日本", wantErr: "malformed tenant"},
		{name: "invalid UTF-8", tenant: "a\xff", wantErr: "malformed tenant"},
		{name: "NUL", tenant: "a\x00b", wantErr: "malformed tenant"},
		{name: "tab", tenant: "a\tb", wantErr: "malformed tenant"},
		{name: "CR LF", tenant: "a\r\nb", wantErr: "malformed tenant"},
		{name: "DEL", tenant: "a\x7f", wantErr: "malformed tenant"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			matchErr(t, Validate(tt.tenant), tt.wantErr)
		})
	}
}

func TestSourceOf(t *testing.T) {
	tests := []struct {
		name    string
		src     Source
		subject string
		header  nats.Header
		want    string
		wantErr string
	}{
		{name: "subject token 1", src: FromSubject(1), subject: "acme.jobs.send", want: "acme"},
		{name: "subject token 2", src: FromSubject(2), subject: "jobs.acme.send", want: "acme"},
		{name: "subject token 3", src: FromSubject(3), subject: "jobs.send.acme", want: "acme"},
		{name: "subject last token", src: FromSubject(2), subject: "jobs.acme", want: "acme"},
		{name: "subject ignores header", src: FromSubject(2), subject: "jobs.acme.x",
			header: nats.Header{"Tenant": {"other"}}, want: "acme"},
		{name: "subject token missing", src: FromSubject(3), subject: "jobs.acme", wantErr: "missing tenant"},
		{name: "subject single token", src: FromSubject(2), subject: "jobs", wantErr: "missing tenant"},
		{name: "zero source", src: Source{}, subject: "jobs.acme", wantErr: "missing tenant"},
		{name: "subject negative token", src: FromSubject(-1), subject: "jobs.acme", wantErr: "missing tenant"},
		{name: "subject empty token", src: FromSubject(2), subject: "jobs..x", wantErr: "missing tenant"},
		{name: "subject trailing empty token", src: FromSubject(2), subject: "jobs.", wantErr: "missing tenant"},
		{name: "subject malformed token", src: FromSubject(2), subject: "jobs.a:b.x", wantErr: "malformed tenant"},
		{name: "subject oversized token", src: FromSubject(2),
			subject: "jobs." + strings.Repeat("a", MaxLen+1), wantErr: "oversized tenant"},

		{name: "header valid", src: FromHeader("Tenant"), subject: "jobs.x.y",
			header: nats.Header{"Tenant": {"acme"}}, want: "acme"},
		{name: "header wins over token", src: Source{Token: 2, Header: "Tenant"}, subject: "jobs.other",
			header: nats.Header{"Tenant": {"acme"}}, want: "acme"},
		{name: "header missing", src: FromHeader("Tenant"), subject: "jobs.acme",
			header: nats.Header{"Other": {"acme"}}, wantErr: "missing tenant"},
		{name: "header missing, nil headers", src: FromHeader("Tenant"), subject: "jobs.acme",
			wantErr: "missing tenant"},
		{name: "header duplicate", src: FromHeader("Tenant"), subject: "jobs.acme",
			header: nats.Header{"Tenant": {"acme", "acme"}}, wantErr: "malformed tenant"},
		{name: "header empty value", src: FromHeader("Tenant"), subject: "jobs.acme",
			header: nats.Header{"Tenant": {""}}, wantErr: "missing tenant"},
		{name: "header malformed value", src: FromHeader("Tenant"), subject: "jobs.acme",
			header: nats.Header{"Tenant": {"a.b"}}, wantErr: "malformed tenant"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.src.Of(tt.subject, tt.header)
			matchErr(t, err, tt.wantErr)
			if got != tt.want {
				t.Fatalf("Of(%q) = %q, want %q", tt.subject, got, tt.want)
			}
		})
	}
}

func TestSourceString(t *testing.T) {
	tests := []struct {
		src  Source
		want string
	}{
		{src: FromSubject(2), want: "subject:2"},
		{src: FromSubject(1), want: "subject:1"},
		{src: FromHeader("X-Tenant"), want: "header:X-Tenant"},
		// The header wins, as it does in Of.
		{src: Source{Token: 3, Header: "X-Tenant"}, want: "header:X-Tenant"},
	}
	for _, tt := range tests {
		if got := tt.src.String(); got != tt.want {
			t.Fatalf("%#v.String() = %q, want %q", tt.src, got, tt.want)
		}
	}
}

// A group is read as a tenant is, with errors that name the group, and a
// missing group is told apart from a malformed one: a job may lack a
// group, never carry a bad one.
func TestSourceGroupOf(t *testing.T) {
	tests := []struct {
		name    string
		src     Source
		subject string
		header  nats.Header
		want    string
		missing bool   // the error wraps ErrMissing
		wantErr string // substring of the error; "" means none
	}{
		{name: "header", src: FromHeader("Org"), subject: "jobs.acme", header: nats.Header{"Org": {"org-1"}}, want: "org-1"},
		{name: "token", src: FromSubject(2), subject: "jobs.org-1.acme", want: "org-1"},
		{name: "no header", src: FromHeader("Org"), subject: "jobs.acme", missing: true, wantErr: "missing group: no Org header"},
		{name: "empty header", src: FromHeader("Org"), subject: "jobs.acme", header: nats.Header{"Org": {""}}, missing: true, wantErr: "missing group: empty"},
		{name: "no token", src: FromSubject(3), subject: "jobs.acme", missing: true, wantErr: "missing group: subject"},
		{name: "two headers", src: FromHeader("Org"), subject: "jobs.acme", header: nats.Header{"Org": {"a", "b"}}, wantErr: "malformed group: 2 Org headers"},
		{name: "malformed", src: FromHeader("Org"), subject: "jobs.acme", header: nats.Header{"Org": {"a.b"}}, wantErr: "malformed group"},
		{name: "oversized", src: FromSubject(2), subject: "jobs." + strings.Repeat("g", MaxLen+1), wantErr: "oversized group"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.src.GroupOf(tt.subject, tt.header)
			matchErr(t, err, tt.wantErr)
			if got != tt.want || errors.Is(err, ErrMissing) != tt.missing {
				t.Fatalf("GroupOf(%q) = %q, %v; want %q, missing %v", tt.subject, got, err, tt.want, tt.missing)
			}
		})
	}
	if err := ValidateGroup("a b"); err == nil || !strings.Contains(err.Error(), "malformed group") {
		t.Fatalf("ValidateGroup(%q) = %v, want a malformed group", "a b", err)
	}
}

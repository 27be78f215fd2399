package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// The http handler's variables: a valid set is read, headers split in
// order.
func TestHTTPSettings(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, map[string]string{
		"THROTTLER_HANDLER":      "http",
		"THROTTLER_HTTP_URL":     "https://api.example.com:8443/jobs/{tenant}?subject={subject}",
		"THROTTLER_HTTP_METHOD":  "PUT",
		"THROTTLER_HTTP_TIMEOUT": "5s",
		"THROTTLER_HTTP_HEADERS": "Authorization=Bearer x, X-Env=prod,X-Empty=",
	})
	want := []HeaderField{{"Authorization", "Bearer x"}, {"X-Env", "prod"}, {"X-Empty", ""}}
	if c.Handler != HandlerHTTP || c.HTTPMethod != "PUT" || c.HTTPTimeout != 5*time.Second || !slices.Equal(c.HTTPHeaderList, want) {
		t.Fatalf("got %q %q %s %v, want http PUT 5s %v", c.Handler, c.HTTPMethod, c.HTTPTimeout, c.HTTPHeaderList, want)
	}
	if got := RenderHTTPURL(c.HTTPURL, "acme", "jobs.acme/x y"); got != "https://api.example.com:8443/jobs/acme?subject=jobs.acme%2Fx%20y" {
		t.Errorf("RenderHTTPURL = %q", got)
	}
}

// Each bad http setting stops start-up naming its variable; the URL and
// the headers' values are never echoed in the clear.
func TestHTTPSettingsInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		vars map[string]string
		bad  string // the variable named
		want string // in the message
	}{
		{"http without URL", map[string]string{"THROTTLER_HANDLER": "http"}, "THROTTLER_HTTP_URL", "required with THROTTLER_HANDLER=http"},
		{"not http", map[string]string{"THROTTLER_HTTP_URL": "ftp://h/{tenant}"}, "THROTTLER_HTTP_URL", "http:// or https://"},
		{"relative", map[string]string{"THROTTLER_HTTP_URL": "/jobs/{tenant}"}, "THROTTLER_HTTP_URL", "http:// or https://"},
		{"no host", map[string]string{"THROTTLER_HTTP_URL": "http:///jobs"}, "THROTTLER_HTTP_URL", "http:// or https://"},
		{"unknown placeholder", map[string]string{"THROTTLER_HTTP_URL": "http://h/{job}"}, "THROTTLER_HTTP_URL", "another placeholder"},
		{"bad port", map[string]string{"THROTTLER_HTTP_URL": "http://h:99999/{tenant}"}, "THROTTLER_HTTP_URL", "http:// or https://"},
		{"password masked", map[string]string{"THROTTLER_HTTP_URL": "ftp://u:s3cret@h/"}, "THROTTLER_HTTP_URL", "u:****@h"},
		{"bad method", map[string]string{"THROTTLER_HTTP_METHOD": "PO ST"}, "THROTTLER_HTTP_METHOD", "HTTP method"},
		{"zero timeout", map[string]string{"THROTTLER_HTTP_TIMEOUT": "0s"}, "THROTTLER_HTTP_TIMEOUT", "greater than 0"},
		{"header without =", map[string]string{"THROTTLER_HTTP_HEADERS": "Authorization: Bearer s3cret"}, "THROTTLER_HTTP_HEADERS", "NAME=VALUE"},
		{"bad header name", map[string]string{"THROTTLER_HTTP_HEADERS": "X Env=s3cret"}, "THROTTLER_HTTP_HEADERS", "not a header name"},
		{"empty entry", map[string]string{"THROTTLER_HTTP_HEADERS": "X-Env=prod,,X-B=s3cret"}, "THROTTLER_HTTP_HEADERS", "entry 2 has no NAME="},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := LoadFrom(tt.vars)
			ps := problems(t, err)
			if len(ps) != 1 || !strings.HasPrefix(ps[0], tt.bad+": ") || !strings.Contains(ps[0], tt.want) {
				t.Fatalf("problems %q, want one naming %s with %q", ps, tt.bad, tt.want)
			}
			if strings.Contains(ps[0], "s3cret") {
				t.Errorf("problem shows a secret: %s", ps[0])
			}
		})
	}
}

// check-config masks the values of the static headers and the URL's
// password and secret query parameters.
func TestPrintMasksHTTPSecrets(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, map[string]string{
		"THROTTLER_HANDLER":      "http",
		"THROTTLER_HTTP_URL":     "https://u:s3cret@api.example.com/jobs/{tenant}?token=t0ken&x=1",
		"THROTTLER_HTTP_HEADERS": "Authorization=Bearer hunter2,X-Env=prod",
	})
	checkPrint(t, c, []string{"s3cret", "t0ken", "hunter2"}, []string{
		"THROTTLER_HTTP_URL=https://u:****@api.example.com/jobs/{tenant}?token=****&x=1\n",
		"THROTTLER_HTTP_HEADERS=Authorization=****,X-Env=****\n",
		"THROTTLER_HTTP_METHOD=POST\n",
		"THROTTLER_HTTP_TIMEOUT=30s\n",
	})
}

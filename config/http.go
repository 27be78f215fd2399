package config

import (
	"net/url"
	"strings"
)

// Sample values put into THROTTLER_HTTP_URL's placeholders to check it.
const (
	sampleTenant  = "acme"
	sampleSubject = "jobs.acme.email"
)

// RenderHTTPURL puts tenant and subj, path-escaped, into the placeholders
// {tenant} and {subject} of an http handler's URL template.
func RenderHTTPURL(template, tenant, subj string) string {
	// Two passes rather than a strings.Replacer, which costs more to build
	// than to run, once per job: an escaped tenant holds no brace, so the
	// second pass cannot find a placeholder in it.
	return strings.ReplaceAll(strings.ReplaceAll(template, "{tenant}", url.PathEscape(tenant)), "{subject}", url.PathEscape(subj))
}

// httpSettings checks the http handler's variables: THROTTLER_HTTP_URL is
// required with THROTTLER_HANDLER=http and checked whenever set; the
// others are checked always, so that a mistake shows before the handler
// is switched on. It returns THROTTLER_HTTP_HEADERS split.
func (ck *checker) httpSettings(c *Config) []HeaderField {
	switch {
	case c.HTTPURL != "":
		ck.httpURL(c.HTTPURL)
	case c.Handler == HandlerHTTP:
		ck.addf("THROTTLER_HTTP_URL", "is required with THROTTLER_HANDLER=http: an http:// or https:// URL, {tenant} and {subject} replaced, such as https://api.example.com/jobs/{tenant}")
	}
	if !HeaderNameOK(c.HTTPMethod) {
		ck.addf("THROTTLER_HTTP_METHOD", "must be an HTTP method such as POST or PUT, got %q", c.HTTPMethod)
	}
	ck.durIn("THROTTLER_HTTP_TIMEOUT", c.HTTPTimeout)
	return ck.httpHeaders(c.HTTPHeaders)
}

// httpURL checks THROTTLER_HTTP_URL: with sample values put in, an
// absolute http(s) URL with a host, and no placeholder but {tenant} and
// {subject}. The URL is never echoed whole: it may hold a password.
func (ck *checker) httpURL(s string) {
	const name = "THROTTLER_HTTP_URL"
	const want = "must be an http:// or https:// URL whose only placeholders are {tenant} and {subject}, such as https://api.example.com/jobs/{tenant}"
	rendered := RenderHTTPURL(s, sampleTenant, sampleSubject)
	if strings.ContainsAny(rendered, "{}") {
		ck.addf(name, "%s: %q has another placeholder", want, MaskURL(s))
		return
	}
	u, err := url.Parse(rendered)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" ||
		(u.Port() != "" && !portOK(u.Port())) {
		ck.addf(name, "%s, got %q", want, MaskURL(s))
	}
}

// httpHeaders splits THROTTLER_HTTP_HEADERS into its NAME=VALUE entries.
// Values are never echoed: they are often secrets.
func (ck *checker) httpHeaders(s string) []HeaderField {
	const name = "THROTTLER_HTTP_HEADERS"
	const want = "must be NAME=VALUE entries separated by commas, such as Authorization=Bearer x,X-Env=prod"
	if strings.TrimSpace(s) == "" {
		return nil
	}
	var out []HeaderField
	for i, entry := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(entry, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok:
			ck.addf(name, "%s: entry %d has no NAME=", want, i+1)
		case !HeaderNameOK(k):
			ck.addf(name, "%s: entry %d's name %q is not a header name (letters, digits and !#$%%&'*+-.^_`|~)", want, i+1, k)
		case strings.ContainsAny(v, "\r\n\x00"):
			ck.addf(name, "%s: the value of %s holds a line break or NUL", want, k)
		default:
			out = append(out, HeaderField{Name: k, Value: v})
		}
	}
	return out
}

// MaskURL masks the password of a URL's user:password@ and the values of
// query parameters naming a password, token or secret.
func MaskURL(s string) string { return maskRedisURL(s) }

// maskHeaders masks every value of THROTTLER_HTTP_HEADERS, keeping the
// names: a header's value is often a credential.
func maskHeaders(s string) string {
	if strings.TrimSpace(s) == "" {
		return s
	}
	entries := strings.Split(s, ",")
	for i, e := range entries {
		if k, _, ok := strings.Cut(e, "="); ok {
			entries[i] = k + "=" + mask
		}
	}
	return strings.Join(entries, ",")
}

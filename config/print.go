package config

import (
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"time"
)

// Print writes the variables of c to w, one NAME=value a line, sorted by
// name, with passwords and tokens in NATS_URL, REDIS_URL and
// THROTTLER_HTTP_URL, the values of THROTTLER_HTTP_HEADERS and
// THROTTLER_ADMIN_TOKEN replaced by ****, then a comment line, "# redis: ...", saying what REDIS_URL names in
// THROTTLER_REDIS_MODE: the mode, the addresses and the sentinels' master.
func (c *Config) Print(w io.Writer) error {
	var lines []string
	v := reflect.ValueOf(c).Elem()
	t := v.Type()
	for i := range t.NumField() {
		name := envName(t.Field(i))
		if name == "" {
			continue
		}
		var value string
		switch f := v.Field(i).Interface().(type) {
		case time.Duration:
			value = formatDuration(f)
		default:
			value = fmt.Sprint(f)
		}
		switch name {
		case "NATS_URL":
			value = maskNATSURLs(value)
		case "REDIS_URL", "THROTTLER_HTTP_URL":
			value = maskRedisURL(value)
		case "THROTTLER_HTTP_HEADERS":
			value = maskHeaders(value)
		case "THROTTLER_ADMIN_TOKEN":
			if value != "" {
				value = mask
			}
		}
		lines = append(lines, name+"="+value+"\n")
	}
	slices.Sort(lines)
	if len(c.RedisAddrs) > 0 {
		lines = append(lines, "# redis: "+c.redisSummary()+"\n")
	}
	_, err := io.WriteString(w, strings.Join(lines, ""))
	return err
}

// formatDuration formats d like time.Duration.String without zero trailing
// units: 10m rather than 10m0s.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// mask is what a secret is replaced with.
const mask = "****"

// maskNATSURLs masks the secret of each comma-separated NATS URL in s: the
// password of user:password@, or the whole token of token@.
func maskNATSURLs(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = maskUserinfo(p, true)
	}
	return strings.Join(parts, ",")
}

// maskRedisURL masks the password of a Redis URL's user:password@, and
// the value of a query parameter that names a secret (?password=…).
func maskRedisURL(s string) string { return maskQuery(maskUserinfo(s, false)) }

// maskQuery masks, in URL s, the value of every query parameter whose
// name speaks of a password, token or secret. It works on the text, as
// maskUserinfo does.
func maskQuery(s string) string {
	base, query, ok := strings.Cut(s, "?")
	if !ok {
		return s
	}
	params := strings.Split(query, "&")
	for i, p := range params {
		name, _, hasValue := strings.Cut(p, "=")
		low := strings.ToLower(name)
		if hasValue && (strings.Contains(low, "pass") || strings.Contains(low, "token") || strings.Contains(low, "secret")) {
			params[i] = name + "=" + mask
		}
	}
	return base + "?" + strings.Join(params, "&")
}

// maskUserinfo masks the password in the userinfo of URL s, and the whole
// userinfo when it has no password and userOnlyIsSecret is set. It works
// on the text, not a parsed URL, so that malformed URLs are masked too; it
// takes everything up to the last "@" as userinfo, which can mask too much
// but never too little.
func maskUserinfo(s string, userOnlyIsSecret bool) string {
	start := 0
	if i := strings.Index(s, "://"); i >= 0 {
		start = i + len("://")
	}
	at := strings.LastIndexByte(s, '@')
	if at < start {
		return s
	}
	user, _, hasPassword := strings.Cut(s[start:at], ":")
	switch {
	case hasPassword:
		return s[:start] + user + ":" + mask + s[at:]
	case userOnlyIsSecret:
		return s[:start] + mask + s[at:]
	}
	return s
}

// MaskedNATSURL is NATS_URL as Print shows it: passwords and tokens masked.
func (c *Config) MaskedNATSURL() string { return maskNATSURLs(c.NATSURL) }

// MaskedRedisURL is REDIS_URL as Print shows it: its password masked.
func (c *Config) MaskedRedisURL() string { return maskRedisURL(c.RedisURL) }

package httphandler

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// retryAfter reads a Retry-After value (RFC 9110 10.2.3): a whole number of
// seconds from now, or an HTTP date. A date already past means now. ok is
// false for an absent or unreadable value.
func retryAfter(v string, now time.Time) (until time.Time, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}, false
	}
	if strings.TrimLeft(v, "0123456789") == "" {
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil || secs > int64(30*24*time.Hour/time.Second) {
			// Past any hold the worker keeps: the longest it keeps.
			return now.Add(30 * 24 * time.Hour), true
		}
		return now.Add(time.Duration(secs) * time.Second), true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return time.Time{}, false
	}
	if t.Before(now) {
		return now, true
	}
	return t, true
}

package httphandler

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode"

	"github.com/throttler/throttler/consumer"
)

// Bounds on what is read of an answer.
const (
	// excerptBytes is how much of an answer's body a reason quotes.
	excerptBytes = 1024
	// drainBytes is how much more of a body is read and discarded before
	// closing it, so that the connection can be reused; a longer body
	// costs its connection instead.
	drainBytes = 64 << 10
)

// outcome turns resp, the answer to what (method and URL, masked), into
// the handler's result, and closes its body.
func (h *Handler) outcome(resp *http.Response, what string) error {
	defer func() {
		_, _ = io.CopyN(io.Discard, resp.Body, drainBytes)
		_ = resp.Body.Close()
	}()
	code := resp.StatusCode
	switch {
	case code >= 200 && code <= 299:
		return nil
	case code == http.StatusTooManyRequests:
		until, ok := retryAfter(resp.Header.Get("Retry-After"), h.opts.Now())
		if !ok {
			until = h.opts.Now().Add(DefaultHold)
		}
		return &consumer.RetryAfter{Until: until, Reason: what + ": " + status(resp)}
	case code == http.StatusServiceUnavailable:
		if until, ok := retryAfter(resp.Header.Get("Retry-After"), h.opts.Now()); ok {
			return &consumer.RetryAfter{Until: until, Reason: what + ": " + status(resp)}
		}
	case code >= 400 && code <= 499:
		// The endpoint refuses this job as it is: no retry can help.
		return consumer.Permanent(fmt.Errorf("%s: %s: %s", what, status(resp), excerpt(resp.Body)))
	}
	return fmt.Errorf("%s: %s: %s", what, status(resp), excerpt(resp.Body))
}

// status is resp's status line, such as "HTTP 404 Not Found".
func status(resp *http.Response) string {
	return fmt.Sprintf("HTTP %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
}

// excerpt reads the first excerptBytes of body as one line of printable
// text, for a reason that ends up in a header and a log line.
func excerpt(body io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(body, excerptBytes))
	s := strings.ToValidUTF8(string(b), "?")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if s == "" {
		return "(empty body)"
	}
	return s
}

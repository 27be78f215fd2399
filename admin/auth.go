package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// authorized reports whether r carries the token: Authorization: Bearer
// TOKEN, compared in constant time (both sides hashed first, so that not
// even the token's length leaks through timing). Without a token every
// request is authorized; Listen allows that only on loopback.
func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.Token == "" {
		return true
	}
	// The scheme is case-insensitive (RFC 9110, 11.1).
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	a, b := sha256.Sum256([]byte(strings.TrimSpace(got))), sha256.Sum256([]byte(s.cfg.Token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// authed lets only authorized requests reach h; the others get 401 and
// nothing else.
func (s *Server) authed(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="throttler"`)
			w.Header().Set("Cache-Control", "no-store")
			writeError(w, http.StatusUnauthorized, "missing or wrong token: send Authorization: Bearer THROTTLER_ADMIN_TOKEN")
			return
		}
		h.ServeHTTP(w, r)
	})
}

package config

import (
	"net"
	"strings"
)

// MinAdminToken is the shortest THROTTLER_ADMIN_TOKEN accepted.
const MinAdminToken = 16

// admin checks THROTTLER_ADMIN_ADDR and THROTTLER_ADMIN_TOKEN: an address
// that is not loopback needs a token, since anyone who reaches it could
// otherwise change every tenant's limits.
func (ck *checker) admin(addr, token string) {
	if token != "" && len(token) < MinAdminToken {
		ck.addf("THROTTLER_ADMIN_TOKEN", "must be empty or at least %d characters, got %d", MinAdminToken, len(token))
	}
	if strings.ContainsAny(token, " \t\r\n") {
		ck.addf("THROTTLER_ADMIN_TOKEN", "must not hold spaces or line breaks")
	}
	if addr == "" {
		return
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || !portOK(port) {
		ck.addf("THROTTLER_ADMIN_ADDR", "must be empty (off) or HOST:PORT such as 127.0.0.1:8081, got %q", addr)
		return
	}
	if token == "" && !LoopbackHost(host) {
		ck.addf("THROTTLER_ADMIN_ADDR", "%q is not a loopback address: serving the admin API beyond this machine needs THROTTLER_ADMIN_TOKEN; set one, or use 127.0.0.1:%s", addr, port)
	}
}

// LoopbackHost reports whether host (of HOST:PORT) names only this
// machine: localhost, or a loopback IP. An empty host (every interface)
// is not loopback.
func LoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

package outage

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
)

// Cause is the kind of a dependency's failure, as an operator would fix it.
type Cause string

// The causes Classify tells apart.
const (
	// CauseUnknown is a failure that names no cause ("no servers
	// available for connection").
	CauseUnknown Cause = "unknown"
	// CauseRefused: nothing listens at the address (wrong port, server down).
	CauseRefused Cause = "connection refused"
	// CauseTimeout: the server did not answer in time (firewall, wrong
	// host, overloaded server).
	CauseTimeout Cause = "timeout"
	// CauseDNS: the host name does not resolve.
	CauseDNS Cause = "host not found"
	// CauseAuth: the server refused the credentials.
	CauseAuth Cause = "authentication"
	// CauseTLS: the TLS handshake failed (certificate, CA, TLS required).
	CauseTLS Cause = "tls"
	// CauseClosed: the server closed the connection.
	CauseClosed Cause = "connection closed"
	// CauseOther is any other failure; the err attribute says what.
	CauseOther Cause = "other"
)

// Classify tells what kind of failure err is.
func Classify(err error) Cause {
	if err == nil {
		return CauseUnknown
	}
	msg := strings.ToLower(err.Error())
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var authorityErr x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var recordErr tls.RecordHeaderError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return CauseRefused
	case errors.As(err, &dnsErr), strings.Contains(msg, "no such host"):
		return CauseDNS
	case errors.As(err, &certErr), errors.As(err, &authorityErr), errors.As(err, &hostErr), errors.As(err, &recordErr),
		strings.Contains(msg, "tls"), strings.Contains(msg, "x509"), strings.Contains(msg, "certificate"):
		return CauseTLS
	case strings.Contains(msg, "authorization"), strings.Contains(msg, "authentication"),
		strings.Contains(msg, "noauth"), strings.Contains(msg, "wrongpass"), strings.Contains(msg, "invalid password"),
		strings.Contains(msg, "user credentials"), strings.Contains(msg, "nkey"):
		return CauseAuth
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded), isTimeout(err),
		strings.Contains(msg, "timeout"):
		return CauseTimeout
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		strings.Contains(msg, "connection reset"), strings.Contains(msg, "eof"), strings.Contains(msg, "connection closed"):
		return CauseClosed
	case strings.Contains(msg, "connection refused"):
		return CauseRefused
	case strings.Contains(msg, "no servers available"):
		return CauseUnknown
	}
	return CauseOther
}

// isTimeout reports whether err says it is a timeout (net.Error).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/nats-io/nkeys"
)

// maxSecretFile bounds the size of a credentials, key or certificate
// file: a larger one is a wrong path, not a key.
const maxSecretFile = 1 << 20

// natsSecurity checks the variables that secure NATS connections: each
// file must be there, readable and of its kind, and they must combine.
// The files are read here, once, so that check-config reports them and a
// worker with a bad one never starts; nats.go reads them again when it
// connects, so a rotated file is picked up on reconnect.
func (ck *checker) natsSecurity(c *Config) {
	if c.NATSCreds != "" && c.NATSNkey != "" {
		ck.addf("NATS_NKEY", "must be empty when NATS_CREDS is set: a connection logs in with one of them, got %q", c.NATSNkey)
	}
	if data, ok := ck.file("NATS_CREDS", c.NATSCreds); ok {
		// A creds file holds a decorated user JWT, then the user's seed.
		jwt, err := nkeys.ParseDecoratedJWT(data)
		if err == nil && strings.Count(jwt, ".") != 2 {
			err = errors.New("no user JWT found")
		}
		if err == nil {
			_, err = nkeys.ParseDecoratedUserNKey(data)
		}
		if err != nil {
			ck.addf("NATS_CREDS", "must be a NATS credentials file (a user JWT and its nkey seed, as nsc writes it): %v, got %q", err, c.NATSCreds)
		}
	}
	if data, ok := ck.file("NATS_NKEY", c.NATSNkey); ok {
		if _, err := nkeys.ParseDecoratedUserNKey(data); err != nil {
			ck.addf("NATS_NKEY", "must be a file holding a user nkey seed (SU…): %v, got %q", err, c.NATSNkey)
		}
	}
	if data, ok := ck.file("NATS_TLS_CA", c.NATSTLSCA); ok {
		if !x509.NewCertPool().AppendCertsFromPEM(data) {
			ck.addf("NATS_TLS_CA", "must be a PEM file of CA certificates: none found, got %q", c.NATSTLSCA)
		}
	}
	switch {
	case c.NATSTLSCert != "" && c.NATSTLSKey == "":
		ck.addf("NATS_TLS_KEY", "must be set with NATS_TLS_CERT: the client certificate's private key (PEM)")
	case c.NATSTLSKey != "" && c.NATSTLSCert == "":
		ck.addf("NATS_TLS_CERT", "must be set with NATS_TLS_KEY: the client certificate (PEM) for that key")
	}
	cert, certOK := ck.file("NATS_TLS_CERT", c.NATSTLSCert)
	key, keyOK := ck.file("NATS_TLS_KEY", c.NATSTLSKey)
	if certOK && keyOK {
		// Never echo err in full: it could quote the key.
		if _, err := tls.X509KeyPair(cert, key); err != nil {
			ck.addf("NATS_TLS_CERT", "with NATS_TLS_KEY must be a PEM certificate and its private key, which %q and %q are not", c.NATSTLSCert, c.NATSTLSKey)
		}
	}
}

// file reads the file variable name gives, recording a problem if it
// cannot. It returns false for an empty path or a problem.
func (ck *checker) file(name, path string) ([]byte, bool) {
	if path == "" {
		return nil, false
	}
	info, err := os.Stat(path)
	switch {
	case err != nil:
		ck.addf(name, "must be a readable file: %v", pathErr(err))
		return nil, false
	case info.IsDir():
		ck.addf(name, "must be a readable file, got the directory %q", path)
		return nil, false
	case info.Size() > maxSecretFile:
		ck.addf(name, "must be a file of at most %d bytes, got %q of %d", maxSecretFile, path, info.Size())
		return nil, false
	}
	data, err := os.ReadFile(path)
	if err != nil {
		ck.addf(name, "must be a readable file: %v", pathErr(err))
		return nil, false
	}
	return data, true
}

// pathErr shows a file error as "open PATH: reason", the path quoted.
func pathErr(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Sprintf("%s %q: %v", pe.Op, pe.Path, pe.Err)
	}
	return err.Error()
}

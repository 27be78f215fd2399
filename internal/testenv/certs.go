package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// testCerts are PEM certificates and keys made for one test: a CA, and a
// server and a client certificate it signed.
type testCerts struct {
	ca                    []byte
	serverCert, serverKey []byte
	clientCert, clientKey []byte
}

// certLifetime is how long the certificates are valid, from an hour ago so
// that a clock a little behind still accepts them.
const certLifetime = 24 * time.Hour

// newTestCerts makes a CA, a server certificate for 127.0.0.1 and
// localhost, and a client certificate.
func newTestCerts() (*testCerts, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	notBefore := time.Now().Add(-time.Hour)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "testenv CA"},
		NotBefore:             notBefore,
		NotAfter:              notBefore.Add(certLifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, fmt.Errorf("%s key: %w", name, err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    notBefore,
			NotAfter:     notBefore.Add(certLifetime),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  []net.IP{net.ParseIP(loopback)},
			DNSNames:     []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, fmt.Errorf("%s certificate: %w", name, err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, nil, fmt.Errorf("%s key: %w", name, err)
		}
		return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", keyDER), nil
	}
	c := &testCerts{ca: pemBlock("CERTIFICATE", caDER)}
	if c.serverCert, c.serverKey, err = leaf(2, "testenv server", x509.ExtKeyUsageServerAuth); err != nil {
		return nil, err
	}
	if c.clientCert, c.clientKey, err = leaf(3, "testenv client", x509.ExtKeyUsageClientAuth); err != nil {
		return nil, err
	}
	return c, nil
}

// pemBlock encodes der as a PEM block of type typ.
func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

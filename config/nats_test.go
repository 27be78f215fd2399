package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// natsFiles are valid files for each NATS variable, written in a test's
// temporary directory, and a few invalid ones.
type natsFiles struct {
	creds, nkey, accountSeed, ca, cert, key, otherKey, garbage, dir string
	seed                                                            string // the user seed in nkey
}

// writeNATSFiles writes the files of natsFiles.
func writeNATSFiles(t *testing.T) natsFiles {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	account, err := nkeys.CreateAccount()
	must(err)
	accountSeed, err := account.Seed()
	must(err)
	user, err := nkeys.CreateUser()
	must(err)
	userSeed, err := user.Seed()
	must(err)
	userPub, err := user.PublicKey()
	must(err)
	token, err := jwt.NewUserClaims(userPub).Encode(account)
	must(err)
	creds, err := jwt.FormatUserConfig(token, userSeed)
	must(err)

	// A self-signed certificate is its own CA: enough for checks that
	// read PEM, not for a handshake.
	pemOf := func(typ string, der []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}) }
	newKey := func() (*ecdsa.PrivateKey, []byte) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		must(err)
		der, err := x509.MarshalPKCS8PrivateKey(k)
		must(err)
		return k, pemOf("PRIVATE KEY", der)
	}
	key, keyPEM := newKey()
	_, otherKeyPEM := newKey()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(err)
	certPEM := pemOf("CERTIFICATE", der)

	return natsFiles{
		creds:       write("user.creds", []byte(creds)),
		nkey:        write("user.nk", userSeed),
		accountSeed: write("account.nk", accountSeed),
		ca:          write("ca.pem", certPEM),
		cert:        write("client.pem", certPEM),
		key:         write("client-key.pem", keyPEM),
		otherKey:    write("other-key.pem", otherKeyPEM),
		garbage:     write("garbage", []byte("not a key\n")),
		dir:         dir,
		seed:        string(userSeed),
	}
}

func TestNATSSecurityValid(t *testing.T) {
	t.Parallel()
	f := writeNATSFiles(t)
	for _, vars := range []map[string]string{
		{"NATS_CREDS": f.creds, "NATS_TLS_CA": f.ca},
		{"NATS_NKEY": f.nkey, "NATS_TLS_CA": f.ca, "NATS_TLS_CERT": f.cert, "NATS_TLS_KEY": f.key},
		{"NATS_TLS_CERT": f.cert, "NATS_TLS_KEY": f.key},
	} {
		c := mustLoad(t, vars)
		if c.NATSCreds != vars["NATS_CREDS"] || c.NATSNkey != vars["NATS_NKEY"] || c.NATSTLSCA != vars["NATS_TLS_CA"] ||
			c.NATSTLSCert != vars["NATS_TLS_CERT"] || c.NATSTLSKey != vars["NATS_TLS_KEY"] {
			t.Errorf("LoadFrom(%v) = %+v", vars, c)
		}
	}
}

func TestNATSSecurityProblems(t *testing.T) {
	t.Parallel()
	f := writeNATSFiles(t)
	missing := filepath.Join(f.dir, "missing.creds")
	tests := []struct {
		name string
		vars map[string]string
		// problem is the one variable blamed, says what its problem says.
		problem, says string
	}{
		{"missing creds", map[string]string{"NATS_CREDS": missing}, "NATS_CREDS", `must be a readable file: stat "` + missing + `": no such file or directory`},
		{"creds is a directory", map[string]string{"NATS_CREDS": f.dir}, "NATS_CREDS", "got the directory"},
		{"creds not creds", map[string]string{"NATS_CREDS": f.nkey}, "NATS_CREDS", "must be a NATS credentials file"},
		{"creds with nkey", map[string]string{"NATS_CREDS": f.creds, "NATS_NKEY": f.nkey}, "NATS_NKEY", "must be empty when NATS_CREDS is set"},
		{"missing nkey", map[string]string{"NATS_NKEY": missing}, "NATS_NKEY", "must be a readable file"},
		{"nkey garbage", map[string]string{"NATS_NKEY": f.garbage}, "NATS_NKEY", "must be a file holding a user nkey seed"},
		{"nkey of an account", map[string]string{"NATS_NKEY": f.accountSeed}, "NATS_NKEY", "must be a file holding a user nkey seed"},
		{"missing CA", map[string]string{"NATS_TLS_CA": missing}, "NATS_TLS_CA", "must be a readable file"},
		{"CA garbage", map[string]string{"NATS_TLS_CA": f.garbage}, "NATS_TLS_CA", "must be a PEM file of CA certificates"},
		{"cert without key", map[string]string{"NATS_TLS_CERT": f.cert}, "NATS_TLS_KEY", "must be set with NATS_TLS_CERT"},
		{"key without cert", map[string]string{"NATS_TLS_KEY": f.key}, "NATS_TLS_CERT", "must be set with NATS_TLS_KEY"},
		{"missing cert", map[string]string{"NATS_TLS_CERT": missing, "NATS_TLS_KEY": f.key}, "NATS_TLS_CERT", "must be a readable file"},
		{"key of another cert", map[string]string{"NATS_TLS_CERT": f.cert, "NATS_TLS_KEY": f.otherKey}, "NATS_TLS_CERT", "must be a PEM certificate and its private key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := LoadFrom(tt.vars)
			got := problems(t, err)
			if len(got) != 1 || !strings.HasPrefix(got[0], tt.problem+": ") || !strings.Contains(got[0], tt.says) {
				t.Fatalf("problems:\n%s\nwant one of %s saying %q", strings.Join(got, "\n"), tt.problem, tt.says)
			}
			if strings.Contains(err.Error(), f.seed) || strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Errorf("problem shows a secret: %v", err)
			}
		})
	}
}

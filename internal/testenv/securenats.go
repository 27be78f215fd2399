package testenv

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// SecureNATSOptions says what a server from StartSecureNATS requires of
// its clients. Any combination may be asked for.
type SecureNATSOptions struct {
	// Creds runs the server in operator mode: it admits users whose JWT is
	// signed by an account it trusts (held by a memory resolver) and who
	// prove they hold the user's seed; SecureNATS.Creds is such a user's
	// credentials file.
	Creds bool
	// Nkey makes the server admit one user, known by its public nkey;
	// SecureNATS.Nkey is the file of its seed.
	Nkey bool
	// TLS makes the server speak TLS only, with a certificate of a CA made
	// for the test (SecureNATS.CA), valid for 127.0.0.1.
	TLS bool
	// MutualTLS is TLS, and the server requires a client certificate signed
	// by that CA (SecureNATS.Cert and SecureNATS.Key).
	MutualTLS bool
	// JetStream enables JetStream, for the account of Creds too.
	JetStream bool
}

// SecureNATS is an in-process nats-server that requires what its
// SecureNATSOptions say, and the files a client needs to satisfy it. The
// files of what was not asked for are "".
type SecureNATS struct {
	// URL is "nats://127.0.0.1:port": a client must turn TLS on itself.
	URL string
	// Creds is a user credentials file (Creds).
	Creds string
	// Nkey is a file holding a user nkey seed (Nkey).
	Nkey string
	// CA is the PEM certificate of the CA that signed the server's and the
	// client's certificates (TLS, MutualTLS).
	CA string
	// Cert and Key are a PEM client certificate and its key (MutualTLS).
	Cert, Key string
}

// StartSecureNATS starts an in-process nats-server on a free port of
// 127.0.0.1 that requires what o says, writes the keys, credentials and
// certificates a client needs in tb.TempDir(), and registers a cleanup
// that shuts the server down.
func StartSecureNATS(tb testing.TB, o SecureNATSOptions) *SecureNATS {
	tb.Helper()
	dir := tb.TempDir()
	write := func(name string, data []byte) string {
		tb.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			tb.Fatalf("testenv: secure nats: %v", err)
		}
		return path
	}
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatalf("testenv: secure nats: %v", err)
		}
	}
	s := &SecureNATS{}
	opts := &server.Options{
		ServerName: "testenv-secure",
		Host:       loopback,
		Port:       -1,
		JetStream:  o.JetStream,
		StoreDir:   filepath.Join(dir, "jetstream"),
		NoLog:      true,
		NoSigs:     true,
	}

	if o.Creds {
		operator, err := nkeys.CreateOperator()
		must(err)
		operatorPub, err := operator.PublicKey()
		must(err)
		account, err := nkeys.CreateAccount()
		must(err)
		accountPub, err := account.PublicKey()
		must(err)
		ac := jwt.NewAccountClaims(accountPub)
		if o.JetStream {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		accountJWT, err := ac.Encode(operator)
		must(err)
		// JetStream needs a system account, and an operator's server has
		// none unless it is given one.
		system, err := nkeys.CreateAccount()
		must(err)
		systemPub, err := system.PublicKey()
		must(err)
		systemJWT, err := jwt.NewAccountClaims(systemPub).Encode(operator)
		must(err)
		resolver := &server.MemAccResolver{}
		must(resolver.Store(accountPub, accountJWT))
		must(resolver.Store(systemPub, systemJWT))
		opts.TrustedKeys = []string{operatorPub}
		opts.AccountResolver = resolver
		opts.SystemAccount = systemPub

		user, err := nkeys.CreateUser()
		must(err)
		userPub, err := user.PublicKey()
		must(err)
		userSeed, err := user.Seed()
		must(err)
		userJWT, err := jwt.NewUserClaims(userPub).Encode(account)
		must(err)
		creds, err := jwt.FormatUserConfig(userJWT, userSeed)
		must(err)
		s.Creds = write("user.creds", creds)
	}

	if o.Nkey {
		user, err := nkeys.CreateUser()
		must(err)
		pub, err := user.PublicKey()
		must(err)
		seed, err := user.Seed()
		must(err)
		opts.Nkeys = []*server.NkeyUser{{Nkey: pub}}
		s.Nkey = write("user.nk", seed)
	}

	if o.TLS || o.MutualTLS {
		certs, err := newTestCerts()
		must(err)
		s.CA = write("ca.pem", certs.ca)
		serverCert := write("server.pem", certs.serverCert)
		serverKey := write("server-key.pem", certs.serverKey)
		tc := &server.TLSConfigOpts{CertFile: serverCert, KeyFile: serverKey, Timeout: 2}
		if o.MutualTLS {
			tc.CaFile, tc.Verify = s.CA, true
			s.Cert = write("client.pem", certs.clientCert)
			s.Key = write("client-key.pem", certs.clientKey)
		}
		opts.TLSConfig, err = server.GenTLSConfig(tc)
		must(err)
		opts.TLS, opts.TLSVerify, opts.TLSTimeout = true, o.MutualTLS, 2
	}

	srv, err := server.NewServer(opts)
	must(err)
	srv.Start()
	tb.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(startTimeout) {
		tb.Fatalf("testenv: secure nats-server not ready for connections after %s", startTimeout)
	}
	addr, ok := srv.Addr().(*net.TCPAddr)
	if !ok {
		tb.Fatalf("testenv: secure nats-server listens on %v, not TCP", srv.Addr())
	}
	s.URL = "nats://" + net.JoinHostPort(loopback, strconv.Itoa(addr.Port))
	return s
}

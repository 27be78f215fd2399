package app

import (
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/throttler/throttler/config"
)

// NATSOptions returns the options that secure a NATS connection as cfg
// says: a credentials file (NATS_CREDS) or an nkey seed (NATS_NKEY) to log
// in with, the CA the server's certificate must chain to (NATS_TLS_CA)
// and a client certificate for mutual TLS (NATS_TLS_CERT, NATS_TLS_KEY).
// With none set it returns none, and the URL's own user:password@ or
// token@, if any, is all the connection presents.
//
// The credentials file is read at every (re)connect, so a rotated one is
// picked up; the nkey seed is read once, here.
func NATSOptions(cfg *config.Config) ([]nats.Option, error) {
	var opts []nats.Option
	if cfg.NATSCreds != "" {
		opts = append(opts, nats.UserCredentials(cfg.NATSCreds))
	}
	if cfg.NATSNkey != "" {
		o, err := nats.NkeyOptionFromSeed(cfg.NATSNkey)
		if err != nil {
			return nil, fmt.Errorf("NATS_NKEY: %w", err)
		}
		opts = append(opts, o)
	}
	if cfg.NATSTLSCA != "" {
		opts = append(opts, nats.RootCAs(cfg.NATSTLSCA))
	}
	if cfg.NATSTLSCert != "" || cfg.NATSTLSKey != "" {
		opts = append(opts, nats.ClientCert(cfg.NATSTLSCert, cfg.NATSTLSKey))
	}
	return opts, nil
}

// ConnectNATS connects to NATS_URL as name, secured by NATSOptions, with
// extra options after those. Every NATS connection of the binary (the
// worker, `throttler limits`, `throttler inspect`, the demo) is made here.
func ConnectNATS(cfg *config.Config, name string, extra ...nats.Option) (*nats.Conn, error) {
	opts, err := NATSOptions(cfg)
	if err != nil {
		return nil, err
	}
	opts = append(append(opts, nats.Name(name)), extra...)
	nc, err := nats.Connect(cfg.NATSURL, opts...)
	if err != nil {
		// Not the URL: it may hold a password.
		return nil, fmt.Errorf("connecting to NATS: %w", err)
	}
	return nc, nil
}

package app

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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

// ExplainNoJetStream returns err, a request to JetStream that nothing
// answered, with what to do when the server nc is connected to runs
// without JetStream: a first-hour mistake (a server started without -js,
// Debian's default), which would otherwise read as an election to wait
// out. Any other err, or a server with JetStream (a cluster electing a
// leader answers again soon), is returned as it is. The server's own word
// (its INFO) is taken only once a request has gone unanswered: a server
// without JetStream may still reach one with it (a leaf node).
func ExplainNoJetStream(nc *nats.Conn, err error) error {
	if err == nil || !(errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled)) {
		return err
	}
	if on, _ := nc.ConnectedServerJetStream(); on || !nc.IsConnected() {
		return err
	}
	return fmt.Errorf("the NATS server at %s runs without JetStream: start it with JetStream on (nats-server -js, or jetstream {} in its configuration): %w",
		nc.ConnectedUrlRedacted(), err)
}

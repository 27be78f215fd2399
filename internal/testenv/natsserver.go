package testenv

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// natsReconnectWait is the delay between reconnect attempts of clients made
// by NATS.Connect; short so tests recover quickly after Restart.
const natsReconnectWait = 50 * time.Millisecond

// NATS is an in-process nats-server with JetStream enabled, owned by one
// test. Its port and JetStream store directory never change, even across
// Restart, so clients reconnect and streams survive. A NATS is safe for
// concurrent use.
type NATS struct {
	port     int
	storeDir string

	mu  sync.Mutex
	srv *server.Server // nil while shut down
}

// StartNATS starts an in-process nats-server with JetStream on a free port of
// 127.0.0.1, storing JetStream data under storeDir (a new tb.TempDir() when
// storeDir is ""). It waits until the server accepts connections and
// registers a cleanup that shuts it down.
func StartNATS(tb testing.TB, storeDir string) *NATS {
	tb.Helper()
	if storeDir == "" {
		storeDir = tb.TempDir()
	}
	n := &NATS{storeDir: storeDir}
	tb.Cleanup(func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		n.shutdownLocked()
	})

	n.mu.Lock()
	defer n.mu.Unlock()
	var lastErr error
	for range portAttempts {
		port, err := freePort()
		if err != nil {
			tb.Fatalf("testenv: start nats: %v", err)
		}
		n.port = port
		if lastErr = n.startLocked(); lastErr == nil {
			return n
		}
	}
	tb.Fatalf("testenv: start nats: %v", lastErr)
	return nil
}

// URL returns the client URL, "nats://127.0.0.1:port".
func (n *NATS) URL() string {
	return "nats://" + net.JoinHostPort(loopback, strconv.Itoa(n.port))
}

// Server returns the running server, or nil while it is shut down. Restart
// replaces the server, so do not keep the result across a Restart.
func (n *NATS) Server() *server.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.srv
}

// Connect returns a client connection to the server that reconnects forever
// (every 50ms) when the server goes away, and is closed when tb's test ends.
func (n *NATS) Connect(tb testing.TB) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(n.URL(),
		nats.Name("testenv:"+tb.Name()),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(natsReconnectWait),
	)
	if err != nil {
		tb.Fatalf("testenv: connect to nats at %s: %v", n.URL(), err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// Shutdown shuts the server down and waits until it has stopped. Shutting
// down a stopped server does nothing.
func (n *NATS) Shutdown(tb testing.TB) {
	tb.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.shutdownLocked()
}

// Restart shuts the server down (if running) and starts a new one with the
// same options: same port and same JetStream store directory, so JetStream
// state survives and clients from Connect reconnect.
func (n *NATS) Restart(tb testing.TB) {
	tb.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.shutdownLocked()
	if err := n.startLocked(); err != nil {
		tb.Fatalf("testenv: restart nats: %v", err)
	}
}

// options returns fresh server options; the server mutates the options it is
// given, so they are never reused across starts.
func (n *NATS) options() *server.Options {
	return &server.Options{
		ServerName: "testenv-" + strconv.Itoa(n.port),
		Host:       loopback,
		Port:       n.port,
		JetStream:  true,
		StoreDir:   n.storeDir,
		NoLog:      true,
		NoSigs:     true,
	}
}

// startLocked starts a server with n's options; n.mu must be held.
func (n *NATS) startLocked() error {
	srv, err := server.NewServer(n.options())
	if err != nil {
		return fmt.Errorf("configure nats-server on port %d: %w", n.port, err)
	}
	srv.Start()
	if !srv.ReadyForConnections(startTimeout) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return fmt.Errorf("nats-server on %s not ready for connections after %s", n.URL(), startTimeout)
	}
	if !srv.JetStreamEnabled() {
		srv.Shutdown()
		srv.WaitForShutdown()
		return fmt.Errorf("nats-server on %s started without JetStream (store dir %s)", n.URL(), n.storeDir)
	}
	n.srv = srv
	return nil
}

// shutdownLocked stops the running server, if any; n.mu must be held.
func (n *NATS) shutdownLocked() {
	if n.srv == nil {
		return
	}
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
	n.srv = nil
}

// StartNATSWithoutJetStream starts an in-process nats-server without
// JetStream, as one started without -js is, on a port of 127.0.0.1 the
// server picks, and returns its URL. A cleanup shuts it down.
func StartNATSWithoutJetStream(tb testing.TB) string {
	tb.Helper()
	srv, err := server.NewServer(&server.Options{Host: loopback, Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	if err != nil {
		tb.Fatalf("testenv: configure nats-server without JetStream: %v", err)
	}
	srv.Start()
	tb.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(startTimeout) {
		tb.Fatalf("testenv: nats-server without JetStream not ready for connections after %s", startTimeout)
	}
	return srv.ClientURL()
}

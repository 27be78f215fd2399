package app

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/testenv"
)

// connectWith connects with ConnectNATS as the settings read from vars say.
func connectWith(t *testing.T, vars map[string]string) (*nats.Conn, error) {
	t.Helper()
	cfg := mustSettle(t, vars)
	return ConnectNATS(cfg.Config, "test", nats.Timeout(5*time.Second))
}

// mustRoundTrip fails the test unless nc can subscribe, publish and
// receive: the server admitted it.
func mustRoundTrip(t *testing.T, nc *nats.Conn) {
	t.Helper()
	sub, err := nc.SubscribeSync("probe")
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	if err := nc.Publish("probe", []byte("x")); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("no message back: %v", err)
	}
}

func TestConnectNATSSecured(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts testenv.SecureNATSOptions
		// without leaves out the credential under test, with adds it.
		without, with func(s *testenv.SecureNATS) map[string]string
		// refused is in the error without it.
		refused string
	}{
		{
			name: "credentials file",
			opts: testenv.SecureNATSOptions{Creds: true},
			with: func(s *testenv.SecureNATS) map[string]string { return map[string]string{"NATS_CREDS": s.Creds} },
			// refused: the server in operator mode takes no anonymous user
			refused: "authorization violation",
		},
		{
			name:    "nkey seed",
			opts:    testenv.SecureNATSOptions{Nkey: true},
			with:    func(s *testenv.SecureNATS) map[string]string { return map[string]string{"NATS_NKEY": s.Nkey} },
			refused: "authorization violation",
		},
		{
			name:    "TLS with the CA",
			opts:    testenv.SecureNATSOptions{TLS: true},
			with:    func(s *testenv.SecureNATS) map[string]string { return map[string]string{"NATS_TLS_CA": s.CA} },
			refused: "tls",
		},
		{
			name:    "mutual TLS",
			opts:    testenv.SecureNATSOptions{MutualTLS: true},
			without: func(s *testenv.SecureNATS) map[string]string { return map[string]string{"NATS_TLS_CA": s.CA} },
			with: func(s *testenv.SecureNATS) map[string]string {
				return map[string]string{"NATS_TLS_CA": s.CA, "NATS_TLS_CERT": s.Cert, "NATS_TLS_KEY": s.Key}
			},
			refused: "tls",
		},
		{
			name: "credentials file over mutual TLS",
			opts: testenv.SecureNATSOptions{Creds: true, MutualTLS: true},
			without: func(s *testenv.SecureNATS) map[string]string {
				return map[string]string{"NATS_TLS_CA": s.CA, "NATS_TLS_CERT": s.Cert, "NATS_TLS_KEY": s.Key}
			},
			with: func(s *testenv.SecureNATS) map[string]string {
				return map[string]string{"NATS_CREDS": s.Creds, "NATS_TLS_CA": s.CA, "NATS_TLS_CERT": s.Cert, "NATS_TLS_KEY": s.Key}
			},
			refused: "authorization violation",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := testenv.StartSecureNATS(t, tt.opts)
			vars := func(more map[string]string) map[string]string {
				all := map[string]string{"NATS_URL": s.URL}
				for k, v := range more {
					all[k] = v
				}
				return all
			}
			var without map[string]string
			if tt.without != nil {
				without = tt.without(s)
			}
			nc, err := connectWith(t, vars(without))
			if err == nil {
				nc.Close()
				t.Fatalf("connected without the credential")
			}
			if !strings.Contains(strings.ToLower(err.Error()), tt.refused) {
				t.Errorf("refused with %v, want an error about %q", err, tt.refused)
			}

			nc, err = connectWith(t, vars(tt.with(s)))
			if err != nil {
				t.Fatalf("ConnectNATS with the credential: %v", err)
			}
			defer nc.Close()
			mustRoundTrip(t, nc)
		})
	}
}

// TestConnectNATSJetStreamWithCredentials: a worker's connection made
// with a credentials file can use JetStream in its account.
func TestConnectNATSJetStreamWithCredentials(t *testing.T) {
	t.Parallel()
	s := testenv.StartSecureNATS(t, testenv.SecureNATSOptions{Creds: true, TLS: true, JetStream: true})
	nc, err := connectWith(t, map[string]string{"NATS_URL": s.URL, "NATS_CREDS": s.Creds, "NATS_TLS_CA": s.CA})
	if err != nil {
		t.Fatalf("ConnectNATS: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.>"}}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	if _, err := js.Publish(ctx, "jobs.acme.1", []byte("x")); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// A request to JetStream that a server without JetStream leaves unanswered
// is explained as such; the same error from a server with JetStream (a
// stream electing its leader) is left as it is.
func TestExplainNoJetStream(t *testing.T) {
	t.Parallel()
	noJS, err := nats.Connect(testenv.StartNATSWithoutJetStream(t))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer noJS.Close()
	js, err := jetstream.New(noJS)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = js.Stream(ctx, "JOBS")
	explained := ExplainNoJetStream(noJS, err)
	if !errors.Is(explained, err) || !strings.Contains(explained.Error(), "runs without JetStream") {
		t.Errorf("without JetStream: %v, want %v explained", explained, err)
	}
	withJS := testenv.StartNATS(t, "").Connect(t)
	if got := ExplainNoJetStream(withJS, err); got != err {
		t.Errorf("with JetStream: %v, want %v as it is", got, err)
	}
	if got := ExplainNoJetStream(noJS, jetstream.ErrStreamNotFound); got != jetstream.ErrStreamNotFound {
		t.Errorf("another error: %v, want it as it is", got)
	}
}

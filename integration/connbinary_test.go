package integration

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/testenv"
)

// exitCode runs cmd and returns its exit status.
func exitCode(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitCode()
	}
	t.Fatalf("run %s: %v", cmd.Path, err)
	return -1
}

// TestBinaryConnections runs the built command against secured servers
// and with bad connection settings.
func TestBinaryConnections(t *testing.T) {
	bin := buildThrottler(t)

	// `throttler limits` connects as the worker does: with the credentials
	// file and the client certificate of the environment.
	t.Run("LimitsOverCredentialsAndMutualTLS", func(t *testing.T) {
		s := testenv.StartSecureNATS(t, testenv.SecureNATSOptions{Creds: true, MutualTLS: true, JetStream: true})
		tls := map[string]string{"NATS_URL": s.URL, "NATS_TLS_CA": s.CA, "NATS_TLS_CERT": s.Cert, "NATS_TLS_KEY": s.Key}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()

		cmd, _, stderr := throttlerCmd(ctx, bin, tls, "limits", "set", "acme", "5/s")
		if code := exitCode(t, cmd); code != 1 || !strings.Contains(strings.ToLower(stderr.String()), "authorization violation") {
			t.Fatalf("without NATS_CREDS: status %d, want 1 and an authorization violation; stderr:\n%s", code, stderr)
		}

		vars := map[string]string{"NATS_CREDS": s.Creds}
		for k, v := range tls {
			vars[k] = v
		}
		cmd, _, stderr = throttlerCmd(ctx, bin, vars, "limits", "set", "acme", "5/s")
		if code := exitCode(t, cmd); code != 0 {
			t.Fatalf("limits set: status %d; stderr:\n%s", code, stderr)
		}
		cmd, stdout, stderr := throttlerCmd(ctx, bin, vars, "limits", "get", "acme")
		if code := exitCode(t, cmd); code != 0 || !strings.Contains(stdout.String(), "5/s") {
			t.Fatalf("limits get: status %d, stdout %q; stderr:\n%s", code, stdout, stderr)
		}
	})

	t.Run("BadConnectionSettingsExitTwo", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "missing.creds")
		for _, tt := range []struct {
			vars  map[string]string
			names []string
		}{
			{map[string]string{"NATS_CREDS": missing}, []string{"NATS_CREDS", missing}},
			{map[string]string{"NATS_TLS_CERT": missing}, []string{"NATS_TLS_CERT", "NATS_TLS_KEY: must be set with NATS_TLS_CERT"}},
			{map[string]string{"THROTTLER_REDIS_MODE": "ring"}, []string{"THROTTLER_REDIS_MODE"}},
			{map[string]string{"REDIS_URL": "redis://127.0.0.1:1?addr=127.0.0.1:2"}, []string{"REDIS_URL", "THROTTLER_REDIS_MODE=cluster"}},
		} {
			for _, args := range [][]string{nil, {"check-config"}} {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				cmd, stdout, stderr := throttlerCmd(ctx, bin, tt.vars, args...)
				code := exitCode(t, cmd)
				cancel()
				if code != 2 {
					t.Errorf("%v %v: status %d, want 2; stderr:\n%s", tt.vars, args, code, stderr)
				}
				for _, name := range tt.names {
					if !strings.Contains(stderr.String(), name) {
						t.Errorf("%v %v: stderr does not name %s:\n%s", tt.vars, args, name, stderr)
					}
				}
				if stdout.Len() != 0 {
					t.Errorf("%v %v: stdout not empty: %s", tt.vars, args, stdout)
				}
			}
		}
	})

	t.Run("CheckConfigShowsSentinelsNotPasswords", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cmd, stdout, stderr := throttlerCmd(ctx, bin, map[string]string{
			"THROTTLER_REDIS_MODE": "sentinel",
			"REDIS_URL":            "redis://sen:sentinelpw@127.0.0.1:1?master_name=jobs&password=masterpw&addr=127.0.0.1:2",
		}, "check-config")
		if code := exitCode(t, cmd); code != 0 {
			t.Fatalf("check-config: status %d; stderr:\n%s", code, stderr)
		}
		out := stdout.String()
		for _, secret := range []string{"sentinelpw", "masterpw"} {
			if strings.Contains(out, secret) {
				t.Errorf("output shows %q:\n%s", secret, out)
			}
		}
		for _, line := range []string{
			"THROTTLER_REDIS_MODE=sentinel\n",
			"REDIS_URL=redis://sen:****@127.0.0.1:1?master_name=jobs&password=****&addr=127.0.0.1:2\n",
			"# redis: sentinel, master \"jobs\", sentinels 127.0.0.1:1 127.0.0.1:2\n",
		} {
			if !strings.Contains(out, line) {
				t.Errorf("output lacks %q:\n%s", line, out)
			}
		}
	})
}

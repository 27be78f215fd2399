package integration

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/testenv"
)

// runningBinary is a throttler process a test started.
type runningBinary struct {
	cmd    *exec.Cmd
	stderr *testenv.Buffer
	exited chan struct{} // closed once err is set
	err    error
}

// startBinary starts bin with vars and kills it when the test ends if it
// is still running.
func startBinary(t *testing.T, bin string, vars map[string]string) *runningBinary {
	t.Helper()
	cmd, _, stderr := throttlerCmd(context.Background(), bin, vars)
	must(t, cmd.Start(), "start throttler")
	b := &runningBinary{cmd: cmd, stderr: stderr, exited: make(chan struct{})}
	go func() { b.err = cmd.Wait(); close(b.exited) }()
	t.Cleanup(func() {
		select {
		case <-b.exited:
		default:
			_ = cmd.Process.Kill()
			<-b.exited
		}
	})
	return b
}

// count is how many lines of its log hold s.
func (b *runningBinary) count(s string) int { return strings.Count(b.stderr.String(), s) }

// stopWithin sends sig and fails the test unless the process exits with
// status 0 within limit.
func (b *runningBinary) stopWithin(t *testing.T, sig syscall.Signal, limit time.Duration) {
	t.Helper()
	start := time.Now()
	must(t, b.cmd.Process.Signal(sig), "signal throttler")
	select {
	case <-b.exited:
	case <-time.After(limit + 10*time.Second):
		t.Fatalf("no exit %s after %s; log:\n%s", limit+10*time.Second, sig, b.stderr)
	}
	if took := time.Since(start); took > limit {
		t.Errorf("exited %s after %s, want within %s; log:\n%s", took.Round(time.Millisecond), sig, limit, b.stderr)
	}
	if b.err != nil {
		t.Errorf("exit after %s: %v, want status 0; log:\n%s", sig, b.err, b.stderr)
	}
}

// TestBinaryUnreachableNATS starts the worker against NATS servers it
// cannot use: the log names the URL (password masked) and the cause once,
// however often the worker retries, and SIGINT or SIGTERM ends it within
// 2 s though it is not connected.
func TestBinaryUnreachableNATS(t *testing.T) {
	bin := buildThrottler(t)
	redis := testenv.StartRedis(t)
	secure := testenv.StartSecureNATS(t, testenv.SecureNATSOptions{Creds: true, JetStream: true})
	tlsOnly := testenv.StartSecureNATS(t, testenv.SecureNATSOptions{TLS: true, JetStream: true})
	closed := "127.0.0.1:" + strconv.Itoa(closedPort(t))
	for _, tt := range []struct {
		name, url, shown, cause string
		sig                     syscall.Signal
	}{
		{"Refused", "nats://alice:hunter2@" + closed, "url=nats://alice:****@" + closed, `cause="connection refused"`, syscall.SIGINT},
		{"Authentication", secure.URL, "url=" + secure.URL, "cause=authentication", syscall.SIGTERM},
		{"TLS", tlsOnly.URL, "url=" + tlsOnly.URL, "cause=tls", syscall.SIGINT},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := startBinary(t, bin, map[string]string{
				"NATS_URL": tt.url, "REDIS_URL": redis.URL(),
				"THROTTLER_LOG_LEVEL": "debug", "THROTTLER_SHUTDOWN_TIMEOUT": "25s",
			})
			testenv.Eventually(t, 15*time.Second, "the log names NATS as unreachable", func() bool {
				return b.count(`msg="NATS unreachable"`) > 0
			})
			// Let the worker retry its set-up a few times more: the cause
			// is still said once.
			testenv.Eventually(t, 15*time.Second, "three more retries", func() bool {
				return b.count("waiting for NATS to set up JetStream") >= 3+strings.Count(b.stderr.String()[:strings.Index(b.stderr.String(), "NATS unreachable")], "waiting for NATS")
			})
			log := b.stderr.String()
			line := log[strings.Index(log, `msg="NATS unreachable"`):]
			line = line[:strings.IndexByte(line, '\n')]
			for _, want := range []string{tt.shown, tt.cause} {
				if !strings.Contains(line, want) {
					t.Errorf("the line lacks %s: %s", want, line)
				}
			}
			if strings.Contains(log, "hunter2") {
				t.Errorf("the log shows the password:\n%s", log)
			}
			if n := b.count("NATS unreachable") + b.count("NATS still unreachable"); n != 1 {
				t.Errorf("%d lines say NATS is unreachable, want 1:\n%s", n, log)
			}
			if b.count("level=WARN") != 1 {
				t.Errorf("warnings besides the one saying NATS is unreachable:\n%s", log)
			}
			b.stopWithin(t, tt.sig, 2*time.Second)
		})
	}
}

// TestBinaryNATSOutageWhileRunning takes NATS away from a running worker
// and brings it back: one line when it goes, one when it is back, and
// SIGINT ends the idle worker within 2 s, connected or not.
func TestBinaryNATSOutageWhileRunning(t *testing.T) {
	bin := buildThrottler(t)
	e := setup(t)
	vars := map[string]string{
		"NATS_URL": e.natsURL, "REDIS_URL": e.redis.URL(),
		"THROTTLER_LOG_LEVEL": "info", "THROTTLER_SHUTDOWN_TIMEOUT": "25s",
	}
	t.Run("IdleConnected", func(t *testing.T) {
		b := startBinary(t, bin, vars)
		testenv.Eventually(t, 15*time.Second, "worker running", func() bool { return b.count("worker running") > 0 })
		b.stopWithin(t, syscall.SIGINT, 2*time.Second)
	})
	t.Run("OutageThenBack", func(t *testing.T) {
		b := startBinary(t, bin, vars)
		testenv.Eventually(t, 15*time.Second, "worker running", func() bool { return b.count("worker running") > 0 })
		e.nats.Shutdown(t)
		testenv.Eventually(t, 15*time.Second, "the log names NATS as unreachable", func() bool {
			return b.count(`msg="NATS unreachable" url=`+e.natsURL) > 0
		})
		e.nats.Restart(t)
		testenv.Eventually(t, 15*time.Second, "the log says NATS is back", func() bool {
			return b.count(`msg="NATS answers again" url=`+e.natsURL) > 0
		})
		if n := b.count(`msg="NATS unreachable"`); n != 1 {
			t.Errorf("%d lines say NATS is unreachable, want 1:\n%s", n, b.stderr)
		}
		e.nats.Shutdown(t)
		testenv.Eventually(t, 15*time.Second, "the second outage logged", func() bool {
			return b.count(`msg="NATS unreachable"`) == 2
		})
		b.stopWithin(t, syscall.SIGINT, 2*time.Second)
	})
}

// TestBinaryRedisOutage runs the worker with Redis down while jobs come
// in: however many calls fail, the log says so once (the outage, with the
// URL and the cause, and what the policy does with the jobs), go-redis's
// line per failed dial is debug only, and one line says Redis is back.
func TestBinaryRedisOutage(t *testing.T) {
	bin := buildThrottler(t)
	e := setup(t)
	cfg := e.config(nil)
	e.ensureStream(cfg)
	e.redis.Stop(t)
	b := startBinary(t, bin, map[string]string{
		"NATS_URL": e.natsURL, "REDIS_URL": e.redis.URL(),
		"THROTTLER_LOG_LEVEL": "debug", "THROTTLER_DEFAULT_LIMIT": "1000/s",
	})
	testenv.Eventually(t, 15*time.Second, "worker running", func() bool { return b.count("worker running") > 0 })
	e.publishJobs(cfg.Stream, "jobs.acme", nil, 50)
	// Many failed calls, each seen by go-redis as a failed dial; the line
	// saying what the policy does with the jobs comes once their group is
	// dispatched, which the dials may outrun.
	testenv.Eventually(t, 30*time.Second, "8 failed dials, and the jobs said to be deferred", func() bool {
		return b.count("failed to dial") >= 8 && b.count(`msg="redis failed; deferring jobs`) > 0
	})
	if n := b.count(`level=WARN msg="Redis unreachable" url=` + e.redis.URL() + ` cause="connection refused"`); n != 1 {
		t.Errorf("%d lines say Redis is unreachable with its URL and cause, want 1:\n%s", n, b.stderr)
	}
	if n := b.count(`msg="redis failed; deferring jobs`); n != 1 {
		t.Errorf("%d lines say the jobs are deferred, want 1:\n%s", n, b.stderr)
	}
	if n := b.count("level=WARN msg=\"redis: connection pool"); n != 0 {
		t.Errorf("%d warnings from go-redis's pool, want none:\n%s", n, b.stderr)
	}
	e.redis.Start(t)
	testenv.Eventually(t, 30*time.Second, "Redis answers again", func() bool {
		return b.count(`level=INFO msg="Redis answers again" url=`+e.redis.URL()) == 1
	})
	b.stopWithin(t, syscall.SIGTERM, 10*time.Second)
}

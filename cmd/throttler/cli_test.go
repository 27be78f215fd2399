package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/throttler/throttler/internal/testenv"
)

// servers are the real servers a command-line test points its environment
// at.
type servers struct {
	nats  *testenv.NATS
	redis *testenv.Redis
}

// setup starts a NATS and a Redis server for one test and points NATS_URL
// and REDIS_URL at them (never the machine's 4222 and 6379).
func setup(t *testing.T) servers {
	t.Helper()
	s := servers{nats: testenv.StartNATS(t, ""), redis: testenv.StartRedis(t)}
	t.Setenv("NATS_URL", s.nats.URL())
	t.Setenv("REDIS_URL", s.redis.URL())
	return s
}

// result is what one run of the command printed, and its exit status.
type result struct {
	code           int
	stdout, stderr string
}

// cli runs `throttler ARGS` in the test's environment.
func cli(t *testing.T, args ...string) result {
	t.Helper()
	var out, errw bytes.Buffer
	code := run(args, &out, &errw)
	return result{code: code, stdout: out.String(), stderr: errw.String()}
}

// want fails the test unless r exited with code and its stdout and stderr
// hold every string of outs and errs.
func (r result) want(t *testing.T, what string, code int, outs []string, errs []string) {
	t.Helper()
	ok := r.code == code
	for _, s := range outs {
		ok = ok && strings.Contains(r.stdout, s)
	}
	for _, s := range errs {
		ok = ok && strings.Contains(r.stderr, s)
	}
	if !ok {
		t.Fatalf("%s: exit %d, want %d with stdout holding %q and stderr %q\nstdout:\n%s\nstderr:\n%s", what, r.code, code, outs, errs, r.stdout, r.stderr)
	}
}

// contains is strings.Contains, short.
func contains(s, sub string) bool { return strings.Contains(s, sub) }

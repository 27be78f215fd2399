package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

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

// childArgs names the variable that makes the test binary run the command
// itself, with the variable's value as its arguments: a test of the worker
// starts it as a process of its own and stops it with a signal.
const childArgs = "GO_TEST_THROTTLER_ARGS"

// TestMain runs the command when started as a child by startChild.
func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(childArgs); ok {
		os.Exit(runProcess(strings.Fields(args)))
	}
	os.Exit(m.Run())
}

// child is a run of the command in a process of its own.
type child struct {
	cmd    *exec.Cmd
	stderr *testenv.Buffer
	done   chan struct{}
}

// startChild starts `throttler ARGS` as a process with the test's
// environment; the test's end kills it if it still runs.
func startChild(t *testing.T, args ...string) *child {
	t.Helper()
	c := &child{cmd: exec.Command(os.Args[0], "-test.run=^$"), stderr: &testenv.Buffer{}, done: make(chan struct{})}
	c.cmd.Env = append(os.Environ(), childArgs+"="+strings.Join(args, " "))
	c.cmd.Stdout, c.cmd.Stderr = c.stderr, c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		<-c.done
	})
	return c
}

// wait waits for the command to exit, within a minute, and returns its
// exit status.
func (c *child) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(time.Minute):
		t.Fatalf("the command did not exit within a minute; it wrote:\n%s", c.stderr)
	}
	return c.cmd.ProcessState.ExitCode()
}

// stop sends SIGTERM and returns the exit status.
func (c *child) stop(t *testing.T) int {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the worker did not stop within 30s of SIGTERM; it wrote:\n%s", c.stderr)
	}
	return c.cmd.ProcessState.ExitCode()
}

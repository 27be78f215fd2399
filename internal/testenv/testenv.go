// Package testenv starts real servers (redis-server, a Redis Cluster and an
// in-process NATS server with JetStream) for tests and benchmarks.
//
// Every Start* function takes a testing.TB, fails the test with tb.Fatalf when
// the server cannot be started (including when a required binary such as
// redis-server is missing: tests are never skipped), and registers a
// tb.Cleanup that stops the server and waits for it to exit.
//
// The package keeps no global state: every server is owned by the value that
// Start* returns. Only the ports it picks are claimed for the process's
// life, in lock files the test processes of the machine share (claimPort).
package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	// loopback is the only interface servers listen on.
	loopback = "127.0.0.1"
	// startTimeout bounds how long a server may take to become ready.
	startTimeout = 10 * time.Second
	// stopTimeout bounds how long a stopped server may keep its port open.
	stopTimeout = 10 * time.Second
	// pollInterval is the delay between two checks of a condition.
	pollInterval = 10 * time.Millisecond
	// dialTimeout bounds a single readiness probe.
	dialTimeout = 500 * time.Millisecond
	// logTailBytes is how much of a server log is quoted in failures.
	logTailBytes = 4096
)

var (
	// errAborted is returned by waitUntil when its abort channel is closed.
	errAborted = errors.New("aborted")
	// errGiveUp, wrapped in an error returned by a waitUntil condition,
	// makes waitUntil return that error at once instead of polling again.
	errGiveUp = errors.New("giving up")
)

// FreePort returns a TCP port on 127.0.0.1 that was free when it was
// checked: it listens on 127.0.0.1:0, reads the port the kernel picked and
// closes the listener. No other test process using this package picks it
// again while this one runs, but any other process may take it before
// the caller binds it, so callers that start servers should be ready to
// retry.
func FreePort(tb testing.TB) int {
	tb.Helper()
	port, err := freePort()
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	return port
}

// freePort is FreePort without a testing.TB. The port is also claimed for
// this process (claimPort), so no other test process picks it while this
// one may still start a server on it.
func freePort() (int, error) {
	for range claimAttempts {
		l, err := net.Listen("tcp", net.JoinHostPort(loopback, "0"))
		if err != nil {
			return 0, fmt.Errorf("pick free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if err := l.Close(); err != nil {
			return 0, fmt.Errorf("pick free port: close listener on %d: %w", port, err)
		}
		if claimPort(port) {
			return port, nil
		}
	}
	return 0, fmt.Errorf("pick free port: the kernel's %d picks were all claimed by test processes", claimAttempts)
}

// claimAttempts bounds how many ports freePort asks the kernel for before
// it gives up: each one claimed already is a port a test process may
// start a server on again.
const claimAttempts = 100

// portFree reports whether port can currently be bound on 127.0.0.1.
func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort(loopback, strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// waitUntil calls cond until it returns nil, timeout elapses, abort is closed
// (a nil abort never fires) or cond returns an error wrapping errGiveUp. The
// returned error wraps the last error returned by cond. It is the one
// polling loop of the package: Eventually is built on it.
func waitUntil(timeout time.Duration, abort <-chan struct{}, cond func() error) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		last := cond()
		if last == nil {
			return nil
		}
		if errors.Is(last, errGiveUp) {
			return last
		}
		select {
		case <-abort:
			// The condition may have become true just before abort.
			if err := cond(); err == nil {
				return nil
			}
			return fmt.Errorf("%w: %w", errAborted, last)
		case <-deadline.C:
			// The condition may have become true since the last check.
			if last = cond(); last == nil {
				return nil
			}
			return fmt.Errorf("timed out after %s: %w", timeout, last)
		case <-tick.C:
		}
	}
}

// waitPortClosed waits until nothing accepts TCP connections on addr.
func waitPortClosed(addr string) error {
	err := waitUntil(stopTimeout, nil, func() error {
		c, err := net.DialTimeout("tcp", addr, dialTimeout)
		if err != nil {
			return nil
		}
		_ = c.Close()
		return fmt.Errorf("%s still accepts connections", addr)
	})
	if err != nil {
		return fmt.Errorf("wait for %s to close: %w", addr, err)
	}
	return nil
}

// logTail returns the last logTailBytes of the file at path, for failure
// messages. It never fails: problems reading the file are described inline.
func logTail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log %s: %v)", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(cannot stat log %s: %v)", path, err)
	}
	off := max(st.Size()-logTailBytes, 0)
	buf := make([]byte, st.Size()-off)
	n, err := f.ReadAt(buf, off)
	if err != nil && n == 0 && len(buf) > 0 {
		return fmt.Sprintf("(cannot read log %s: %v)", path, err)
	}
	text := strings.TrimSpace(string(buf[:n]))
	if text == "" {
		return fmt.Sprintf("(log %s is empty)", path)
	}
	return fmt.Sprintf("--- tail of %s ---\n%s\n---", path, text)
}

// respCommand sends one command to the Redis server at addr over a fresh
// connection and returns its reply. Simple strings, integers and bulk strings
// are returned as text; an error reply is returned as an error. It is used
// for readiness probes, where a full client would retry and log.
func respCommand(addr string, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return "", fmt.Errorf("set deadline: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", fmt.Errorf("send %s: %w", args[0], err)
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("read %s reply: %w", args[0], err)
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty %s reply", args[0])
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("%s: server error: %s", args[0], line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("%s: unexpected bulk header %q", args[0], line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", fmt.Errorf("read %s bulk reply: %w", args[0], err)
		}
		return string(buf[:n]), nil
	default:
		return "", fmt.Errorf("%s: unsupported reply %q", args[0], line)
	}
}

// FreeAddr returns "127.0.0.1:PORT" with a port nothing listens on now,
// for a server a test starts itself (such as the admin API's).
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	port, err := freePort()
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	return net.JoinHostPort(loopback, strconv.Itoa(port))
}

package testenv

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// LegacyNATSBinary is the nats-server program StartLegacyNATS runs: an older
// release installed from the distribution (Debian's package is 2.9.10), used
// to test behaviour on servers without message schedules.
const LegacyNATSBinary = "nats-server"

// LegacyNATS is a nats-server process started from LegacyNATSBinary with
// JetStream on, owned by one test.
type LegacyNATS struct {
	port int
}

// StartLegacyNATS starts the nats-server program found in PATH (not the
// in-process one) with JetStream on a free port, its store in a temporary
// directory, waits until it accepts connections, and kills it when the test
// ends. A missing program fails the test: scripts/test.sh installs it.
func StartLegacyNATS(tb testing.TB) *LegacyNATS {
	tb.Helper()
	bin, err := exec.LookPath(LegacyNATSBinary)
	if err != nil {
		tb.Fatalf("testenv: %s is required but was not found in PATH: %v "+
			"(install it, e.g. `apt-get install -y nats-server`, or run scripts/test.sh)", LegacyNATSBinary, err)
	}
	dir := tb.TempDir()
	port, err := freePort()
	if err != nil {
		tb.Fatalf("testenv: legacy nats: %v", err)
	}
	logPath := filepath.Join(dir, "nats.log")
	// A name of its own: the port, picked free, may be taken by another
	// test process's server before this one binds it, and only the name
	// in the INFO it greets with tells the two apart.
	name := fmt.Sprintf("testenv-legacy-%d-%d", os.Getpid(), port)
	cmd := exec.Command(bin, "-a", loopback, "-p", strconv.Itoa(port), "-n", name, "-js", "-sd", filepath.Join(dir, "store"), "-l", logPath)
	configureChild(cmd)
	if err := cmd.Start(); err != nil {
		tb.Fatalf("testenv: start %s: %v", bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	addr := net.JoinHostPort(loopback, strconv.Itoa(port))
	err = waitUntil(10*time.Second, done, func() error {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return err
		}
		defer c.Close()
		if err := c.SetReadDeadline(time.Now().Add(time.Second)); err != nil {
			return err
		}
		info, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return fmt.Errorf("read INFO: %w", err)
		}
		if !strings.Contains(info, `"server_name":"`+name+`"`) {
			return fmt.Errorf("%s is another server: %.120s", addr, info)
		}
		return nil
	})
	if err != nil {
		tail := logTail(logPath)
		if _, statErr := os.Stat(logPath); statErr != nil {
			tail = "(no log)"
		}
		tb.Fatalf("testenv: %s not ready on %s: %v\n%s", bin, addr, err, tail)
	}
	return &LegacyNATS{port: port}
}

// URL returns the client URL, "nats://127.0.0.1:port".
func (n *LegacyNATS) URL() string {
	return "nats://" + net.JoinHostPort(loopback, strconv.Itoa(n.port))
}

package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/internal/testenv"
)

// startScript runs scripts/NAME with args in a process group of its own,
// its output captured; the test's end interrupts the group if it still
// runs.
func startScript(t *testing.T, name string, args ...string) (cmd *exec.Cmd, stdout, stderr *testenv.Buffer, done <-chan struct{}) {
	t.Helper()
	cmd = exec.Command("bash", append([]string{"../scripts/" + name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, stderr = &testenv.Buffer{}, &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting scripts/%s: %v", name, err)
	}
	ch := make(chan struct{})
	go func() { _ = cmd.Wait(); close(ch) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		select {
		case <-ch:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-ch
		}
	})
	return cmd, stdout, stderr, ch
}

// TestServersScript runs scripts/servers.sh with a NATS port given and the
// Redis port free: the environment it prints reaches a JetStream server of
// 2.12 or later (message schedules) and a Redis, and Ctrl-C stops both and
// removes their data.
func TestServersScript(t *testing.T) {
	natsPort := testenv.FreePort(t)
	cmd, stdout, stderr, done := startScript(t, "servers.sh", "-nats-port", strconv.Itoa(natsPort))
	testenv.Eventually(t, 3*time.Minute, "servers.sh to print the environment", func() bool {
		select {
		case <-done:
			t.Fatalf("servers.sh exited early\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		default:
		}
		return strings.Contains(stdout.String(), "export REDIS_URL=")
	})
	out := stdout.String()
	vars := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^export (\w+)=(\S+)$`).FindAllStringSubmatch(out, -1) {
		vars[m[1]] = m[2]
	}
	if vars["NATS_URL"] != "nats://127.0.0.1:"+strconv.Itoa(natsPort) || !strings.HasPrefix(vars["REDIS_URL"], "redis://127.0.0.1:") {
		t.Fatalf("servers.sh printed %v, want NATS_URL on port %d and a REDIS_URL\nstdout:\n%s\nstderr:\n%s", vars, natsPort, out, stderr.String())
	}

	nc, err := nats.Connect(vars["NATS_URL"], nats.Timeout(5*time.Second))
	must(t, err, "connecting to the NATS_URL printed")
	defer nc.Close()
	var major, minor int
	if _, err := fmt.Sscanf(nc.ConnectedServerVersion(), "%d.%d", &major, &minor); err != nil || major < 2 || (major == 2 && minor < 12) {
		t.Fatalf("nats-server %q, want 2.12 or later", nc.ConnectedServerVersion())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	must(t, err, "jetstream")
	_, err = js.AccountInfo(ctx)
	must(t, err, "JetStream on the NATS_URL printed")
	opt, err := redis.ParseURL(vars["REDIS_URL"])
	must(t, err, "the REDIS_URL printed")
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	must(t, rdb.Ping(ctx).Err(), "PING on the REDIS_URL printed")

	store := regexp.MustCompile(`store (\S+)`).FindStringSubmatch(out)
	if store == nil {
		t.Fatalf("servers.sh does not say where NATS stores its data:\n%s", out)
	}
	must(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGINT), "Ctrl-C")
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("servers.sh did not stop within 20s of Ctrl-C")
	}
	for _, addr := range []string{strings.TrimPrefix(vars["NATS_URL"], "nats://"), strings.TrimPrefix(vars["REDIS_URL"], "redis://")} {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = c.Close()
			t.Errorf("%s still answers after Ctrl-C", addr)
		}
	}
	if _, err := os.Stat(store[1]); !os.IsNotExist(err) {
		t.Errorf("the NATS store %s is still there after Ctrl-C (%v)", store[1], err)
	}
}

// TestDemoScriptSaysItBuildsFirst checks that scripts/demo.sh's first line
// says it builds first, before the silent compile, and that the demo
// then runs to its verdict.
func TestDemoScriptSaysItBuildsFirst(t *testing.T) {
	_, stdout, stderr, done := startScript(t, "demo.sh", "-duration", "1s")
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		t.Fatalf("demo.sh -duration 1s did not end; it printed:\n%s", stdout.String())
	}
	out := stdout.String()
	first, _, _ := strings.Cut(out, "\n")
	if !strings.Contains(first, "building the worker first") || !strings.Contains(out, "Verdict") {
		t.Fatalf("demo.sh printed first %q, want the line saying it builds first, and a verdict at the end\nstdout:\n%s\nstderr:\n%s", first, out, stderr.String())
	}
}

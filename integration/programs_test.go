package integration

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

// programs are the binaries the tests run as processes, cmd/throttler and
// nats-server, built once per run of this package's tests. TestMain starts
// the build before the first test, at the lowest CPU priority, so that it
// overlaps the tests that need no binary (most of them wait on timers more
// than they compute) rather than holding up the first that does; built
// cold, the two take about a minute of two cores.
type programs struct {
	dir  string
	cmd  *exec.Cmd
	log  string
	once sync.Once
	err  error
}

// startPrograms starts building the programs into a new temporary
// directory. Its output goes to a file, not a pipe, so that no goroutine
// copies it while tests run (goleak would count one).
func startPrograms() (*programs, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("the go command is needed to build cmd/throttler and nats-server: %w", err)
	}
	dir, err := os.MkdirTemp("", "throttler-integration-")
	if err != nil {
		return nil, fmt.Errorf("directory for the test programs: %w", err)
	}
	p := &programs{dir: dir, log: filepath.Join(dir, "build.log")}
	out, err := os.Create(p.log)
	if err != nil {
		return nil, fmt.Errorf("build log: %w", err)
	}
	defer out.Close()
	// One go build of both: packages they share (nats-server's, which the
	// demo embeds) are compiled once. With -o naming a directory, each
	// binary is named for its package: throttler and nats-server.
	args := []string{goBin, "build", "-o", dir + string(filepath.Separator), "./cmd/throttler", "github.com/nats-io/nats-server/v2"}
	if nice, err := exec.LookPath("nice"); err == nil {
		args = append([]string{nice, "-n", "19"}, args...)
	}
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.Dir = ".."
	p.cmd.Stdout, p.cmd.Stderr = out, out
	// Its own process group, so that stop ends the compilers go started.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start go build: %w", err)
	}
	return p, nil
}

// wait waits for the build, once; it returns its error, with its output.
func (p *programs) wait() error {
	p.once.Do(func() {
		if err := p.cmd.Wait(); err != nil {
			out, _ := os.ReadFile(p.log)
			p.err = fmt.Errorf("go build ./cmd/throttler github.com/nats-io/nats-server/v2: %w\n%s", err, out)
		}
	})
	return p.err
}

// stop ends a build no test waited for and removes the programs.
func (p *programs) stop() {
	p.once.Do(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		_ = p.cmd.Wait()
		p.err = errors.New("the test programs were removed")
	})
	_ = os.RemoveAll(p.dir)
}

// path returns the path of the program named name once it is built.
func (p *programs) path(tb testing.TB, name string) string {
	tb.Helper()
	if p == nil {
		tb.Fatal("the test programs were not started (TestMain)")
	}
	if err := p.wait(); err != nil {
		tb.Fatal(err)
	}
	return filepath.Join(p.dir, name)
}

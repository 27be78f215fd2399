package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// portAttempts is how many free ports a first start tries before giving up,
// in case another process binds a picked port before redis-server does.
const portAttempts = 5

// errExited reports that a server process exited before it became ready.
var errExited = errors.New("server process exited before becoming ready")

// Redis is a redis-server process owned by one test. Its address never
// changes, even across Stop/Start/Restart. A Redis is safe for concurrent
// use.
type Redis struct {
	// Addr is the server address, "127.0.0.1:port".
	Addr string

	bin     string
	port    int
	baseDir string

	mu   sync.Mutex
	proc *redisProc // nil while stopped
}

// StartRedis starts a private redis-server on a free port of 127.0.0.1 with
// persistence disabled and its data directory inside tb.TempDir(). It waits
// until the server answers PING and registers a cleanup that kills it.
// It fails the test if redis-server is not in PATH or does not start.
func StartRedis(tb testing.TB) *Redis {
	tb.Helper()
	r := &Redis{bin: lookBinary(tb, "redis-server"), baseDir: tb.TempDir()}
	tb.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if err := r.stopLocked(); err != nil {
			tb.Errorf("testenv: cleanup: %v", err)
		}
	})

	r.mu.Lock()
	defer r.mu.Unlock()
	proc, err := launchOnFreePort(r.bin, r.baseDir, func() (int, error) { return freePort() }, nil)
	if err != nil {
		tb.Fatalf("testenv: start redis: %v", err)
	}
	r.proc, r.port, r.Addr = proc, proc.port, proc.addr
	return r
}

// URL returns the server address as a URL, "redis://127.0.0.1:port".
func (r *Redis) URL() string {
	return "redis://" + r.Addr
}

// Client returns a go-redis client for the server. The client is closed when
// tb's test ends. It keeps working across Restart (it reconnects).
func (r *Redis) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	tb.Cleanup(func() {
		if err := c.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
			tb.Errorf("testenv: close redis client for %s: %v", r.Addr, err)
		}
	})
	return c
}

// Pid returns the process id of the redis-server last started, or 0 after
// Stop.
func (r *Redis) Pid() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil {
		return 0
	}
	return r.proc.cmd.Process.Pid
}

// Stop kills the server with SIGKILL (no graceful shutdown, nothing is
// saved), waits for the process to exit and for its port to stop accepting
// connections. Stopping a stopped server does nothing.
func (r *Redis) Stop(tb testing.TB) {
	tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.stopLocked(); err != nil {
		tb.Fatalf("testenv: stop redis: %v", err)
	}
}

// Start starts the server again on the same address after Stop. It starts
// from an empty data directory, so every key and the script cache are gone.
// It fails the test if the server is still running.
func (r *Redis) Start(tb testing.TB) {
	tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc != nil && !r.proc.exited() {
		tb.Fatalf("testenv: start redis on %s: already running (pid %d)", r.Addr, r.proc.cmd.Process.Pid)
	}
	if err := r.stopLocked(); err != nil { // reap a process that died on its own
		tb.Fatalf("testenv: start redis: %v", err)
	}
	if err := r.startLocked(); err != nil {
		tb.Fatalf("testenv: start redis: %v", err)
	}
}

// Restart stops the server if it is running (see Stop) and starts it again
// on the same address with empty data (see Start).
func (r *Redis) Restart(tb testing.TB) {
	tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.stopLocked(); err != nil {
		tb.Fatalf("testenv: restart redis: %v", err)
	}
	if err := r.startLocked(); err != nil {
		tb.Fatalf("testenv: restart redis: %v", err)
	}
}

// startLocked starts a fresh process on r.port; r.mu must be held.
func (r *Redis) startLocked() error {
	dir, err := os.MkdirTemp(r.baseDir, "run-")
	if err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	proc, err := launchRedis(r.bin, dir, r.port, nil)
	if err != nil {
		return err
	}
	r.proc = proc
	return nil
}

// stopLocked kills the running process, if any; r.mu must be held.
func (r *Redis) stopLocked() error {
	if r.proc == nil {
		return nil
	}
	proc := r.proc
	r.proc = nil
	return proc.kill()
}

// lookBinary returns the path of the named program, failing the test if it
// is not in PATH.
func lookBinary(tb testing.TB, name string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		tb.Fatalf("testenv: %s is required but was not found in PATH: %v "+
			"(install Redis, e.g. `apt-get install -y redis-server`, or run scripts/test.sh)", name, err)
	}
	return path
}

// redisProc is one redis-server process.
type redisProc struct {
	cmd     *exec.Cmd
	port    int
	addr    string
	logPath string
	done    chan struct{} // closed once the process has exited and been reaped
	waitErr error         // result of cmd.Wait, valid once done is closed
}

// launchOnFreePort starts redis-server on a port returned by pick, in a new
// directory under baseDir, retrying with another port if the process exits
// before it is ready (typically because the port was taken in between).
// extra, if not nil, returns additional arguments for a port and directory.
func launchOnFreePort(bin, baseDir string, pick func() (int, error), extra func(port int, dir string) []string) (*redisProc, error) {
	var lastErr error
	for range portAttempts {
		port, err := pick()
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp(baseDir, "redis-"+strconv.Itoa(port)+"-")
		if err != nil {
			return nil, fmt.Errorf("create data dir: %w", err)
		}
		var args []string
		if extra != nil {
			args = extra(port, dir)
		}
		proc, err := launchRedis(bin, dir, port, args)
		if err == nil {
			return proc, nil
		}
		lastErr = err
		if !errors.Is(err, errExited) {
			break
		}
	}
	return nil, lastErr
}

// launchRedis starts redis-server on port with dir as its working and data
// directory and waits until it answers PING. On failure the process is
// killed and the error quotes the end of its log.
func launchRedis(bin, dir string, port int, extra []string) (*redisProc, error) {
	proc, err := startRedisProc(bin, dir, port, extra)
	if err != nil {
		return nil, err
	}
	if err := proc.waitReady(); err != nil {
		if kerr := proc.kill(); kerr != nil {
			err = errors.Join(err, kerr)
		}
		return nil, fmt.Errorf("%w\n%s", err, logTail(proc.logPath))
	}
	return proc, nil
}

// startRedisProc starts redis-server without waiting for it to be ready. Its
// stdout and stderr (where it logs) go to dir/redis.log.
func startRedisProc(bin, dir string, port int, extra []string) (*redisProc, error) {
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", loopback,
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--protected-mode", "no",
		"--daemonize", "no",
		"--logfile", "", // log to stdout, i.e. logPath
	}
	args = append(args, extra...)
	return spawnRedis(bin, dir, port, args)
}

// spawnRedis runs bin (redis-server) with args in dir, to listen on port,
// without waiting for it to be ready. Its stdout and stderr go to
// dir/redis.log.
func spawnRedis(bin, dir string, port int, args []string) (*redisProc, error) {
	logPath := filepath.Join(dir, "redis.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create redis log: %w", err)
	}
	defer logFile.Close() // the child has its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	configureChild(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("run %s on port %d: %w", bin, port, err)
	}
	p := &redisProc{
		cmd:     cmd,
		port:    port,
		addr:    net.JoinHostPort(loopback, strconv.Itoa(port)),
		logPath: logPath,
		done:    make(chan struct{}),
	}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// waitReady waits until the process answers on its port, as itself. A
// port picked free can be taken by another test process's server before
// this one binds it: that server would answer a PING, and two tests would
// share it (one flushing or killing what the other reads). So the answer
// must come from this process (INFO's process_id); this one then fails to
// bind, exits, and is started again on another port.
func (p *redisProc) waitReady() error {
	pid := strconv.Itoa(p.cmd.Process.Pid)
	err := waitUntil(startTimeout, p.done, func() error {
		info, err := respCommand(p.addr, "INFO", "server")
		if err != nil {
			return err
		}
		if got := parseInfo(info)["process_id"]; got != pid {
			return fmt.Errorf("%s answered by process %q, not redis-server pid %s", p.addr, got, pid)
		}
		return nil
	})
	if errors.Is(err, errAborted) {
		return fmt.Errorf("redis-server on %s: %w (%v)", p.addr, errExited, p.waitErr)
	}
	if err != nil {
		return fmt.Errorf("redis-server on %s did not answer PING: %w", p.addr, err)
	}
	return nil
}

// exited reports whether the process has exited.
func (p *redisProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL, waits for the process to be reaped and for its port to
// stop accepting connections.
func (p *redisProc) kill() error {
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill redis-server pid %d: %w", p.cmd.Process.Pid, err)
	}
	<-p.done
	return waitPortClosed(p.addr)
}

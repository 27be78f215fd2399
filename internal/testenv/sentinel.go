package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sentinelReadyTimeout bounds the wait for every sentinel to report the
// master healthy and to know the other sentinels.
const sentinelReadyTimeout = 30 * time.Second

// Sentinel is a Redis master watched by Redis Sentinel processes, owned by
// one test.
type Sentinel struct {
	// MasterName is the name the sentinels know the master by.
	MasterName string
	// Master is the master's "127.0.0.1:port".
	Master string
	// Addrs holds the "127.0.0.1:port" of every sentinel.
	Addrs []string

	procs []*redisProc
}

// StartRedisSentinel starts a redis-server master and sentinels
// processes of `redis-server --sentinel` monitoring it, each on a free
// port, and waits until every sentinel reports the master ok and knows
// the others. A cleanup kills them all. It fails the test if redis-server
// is not in PATH or the sentinels do not settle.
func StartRedisSentinel(tb testing.TB, sentinels int) *Sentinel {
	tb.Helper()
	if sentinels < 1 {
		tb.Fatalf("testenv: start redis sentinel: need at least 1 sentinel, got %d", sentinels)
	}
	bin := lookBinary(tb, "redis-server")
	baseDir := tb.TempDir()
	s := &Sentinel{MasterName: "throttler"}
	tb.Cleanup(func() {
		var errs []error
		for _, p := range s.procs {
			errs = append(errs, p.kill())
		}
		if err := errors.Join(errs...); err != nil {
			tb.Errorf("testenv: cleanup redis sentinel: %v", err)
		}
	})

	master, err := launchOnFreePort(bin, baseDir, freePort, nil)
	if err != nil {
		tb.Fatalf("testenv: start redis sentinel: master: %v", err)
	}
	s.procs = append(s.procs, master)
	s.Master = master.addr

	for i := range sentinels {
		p, err := s.launchSentinel(bin, baseDir, master.port)
		if err != nil {
			tb.Fatalf("testenv: start redis sentinel %d of %d: %v", i+1, sentinels, err)
		}
		s.procs = append(s.procs, p)
		s.Addrs = append(s.Addrs, p.addr)
	}
	if err := s.waitReady(); err != nil {
		tb.Fatalf("testenv: start redis sentinel: %v\n%s", err, s.logTails())
	}
	return s
}

// launchSentinel starts one sentinel monitoring the master on masterPort,
// on a free port, retrying another port if the process exits before it
// answers PING.
func (s *Sentinel) launchSentinel(bin, baseDir string, masterPort int) (*redisProc, error) {
	var lastErr error
	for range portAttempts {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp(baseDir, "sentinel-"+strconv.Itoa(port)+"-")
		if err != nil {
			return nil, fmt.Errorf("create sentinel dir: %w", err)
		}
		// A sentinel needs a configuration file it can rewrite. A quorum
		// of 1 lets any sentinel alone decide; a test never fails over.
		conf := strings.Join([]string{
			"port " + strconv.Itoa(port),
			"bind " + loopback,
			"protected-mode no",
			"daemonize no",
			`logfile ""`,
			"dir " + dir,
			fmt.Sprintf("sentinel monitor %s %s %d 1", s.MasterName, loopback, masterPort),
			"sentinel down-after-milliseconds " + s.MasterName + " 60000",
		}, "\n") + "\n"
		confPath := filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
			return nil, fmt.Errorf("write sentinel config: %w", err)
		}
		proc, err := spawnRedis(bin, dir, port, []string{confPath, "--sentinel"})
		if err != nil {
			return nil, err
		}
		if err = proc.waitReady(); err == nil {
			return proc, nil
		}
		if kerr := proc.kill(); kerr != nil {
			err = errors.Join(err, kerr)
		}
		lastErr = fmt.Errorf("%w\n%s", err, logTail(proc.logPath))
		if !errors.Is(err, errExited) {
			break
		}
	}
	return nil, lastErr
}

// waitReady waits until every sentinel reports the master with status ok,
// at its address, and knows every sentinel.
func (s *Sentinel) waitReady() error {
	want := fmt.Sprintf("name=%s,status=ok,address=%s,slaves=0,sentinels=%d", s.MasterName, s.Master, len(s.Addrs))
	err := waitUntil(sentinelReadyTimeout, nil, func() error {
		for _, p := range s.procs[1:] {
			if p.exited() {
				return fmt.Errorf("%w: sentinel %s exited (%v)", errGiveUp, p.addr, p.waitErr)
			}
			info, err := respCommand(p.addr, "INFO", "sentinel")
			if err != nil {
				return fmt.Errorf("sentinel %s: %w", p.addr, err)
			}
			if got := parseInfo(info)["master0"]; got != want {
				return fmt.Errorf("sentinel %s: master0 is %q, want %q", p.addr, got, want)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("wait for the sentinels to know the master: %w", err)
	}
	return nil
}

// logTails returns the end of every process's log.
func (s *Sentinel) logTails() string {
	var b strings.Builder
	for _, p := range s.procs {
		b.WriteString(logTail(p.logPath))
		b.WriteByte('\n')
	}
	return b.String()
}

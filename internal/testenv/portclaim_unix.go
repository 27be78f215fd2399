//go:build unix

package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// claimPort reserves port for this process among the test processes of
// the machine (go test runs packages side by side): it takes an exclusive
// lock on a file named for the port, and keeps it until the process
// exits. A test that stops a server and starts it again on the same port
// needs the port while nothing listens on it, and the kernel would hand
// it to another process asking for a free one; with the lock, that
// process picks another. The descriptor is left open on purpose, outside
// any Go value (an *os.File would close it when collected). It reports
// false when another process (or an earlier claim of this one) holds the
// port; true also when the lock cannot be taken at all, as the kernel's
// pick is then all there is.
func claimPort(port int) bool {
	dir := filepath.Join(os.TempDir(), "throttler-testenv-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return true
	}
	fd, err := syscall.Open(filepath.Join(dir, strconv.Itoa(port)), syscall.O_CREAT|syscall.O_RDWR|syscall.O_CLOEXEC, 0o666)
	if err != nil {
		return true
	}
	if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = syscall.Close(fd)
		return false
	}
	return true
}

//go:build linux

package testenv

import (
	"os/exec"
	"syscall"
)

// configureChild makes the kernel kill the child when the test binary dies
// (for example on a `go test -timeout` panic, when no cleanup runs), so no
// redis-server outlives its test.
func configureChild(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

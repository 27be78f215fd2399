//go:build !linux

package testenv

import "os/exec"

// configureChild is a no-op where the parent-death signal is unavailable.
func configureChild(*exec.Cmd) {}

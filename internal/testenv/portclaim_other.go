//go:build !unix

package testenv

// claimPort cannot reserve a port here: the kernel's pick is all there is.
func claimPort(int) bool { return true }

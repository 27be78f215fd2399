package testenv

import (
	"errors"
	"testing"
	"time"
)

// errNotYet is what Eventually's condition reports to waitUntil while it
// does not hold.
var errNotYet = errors.New("not yet")

// Eventually checks cond every few milliseconds until it holds, and fails
// tb, naming what it waited for, when timeout passes first. Tests wait for
// conditions only this way: never by sleeping and then asserting. It polls
// with waitUntil, the loop the Start* functions wait for servers with.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	err := waitUntil(timeout, nil, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
	if err != nil {
		tb.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

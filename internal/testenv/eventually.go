package testenv

import (
	"testing"
	"time"
)

// eventuallyEvery is how often Eventually checks its condition.
const eventuallyEvery = 10 * time.Millisecond

// Eventually checks cond every few milliseconds until it holds, and fails
// tb, naming what it waited for, when timeout passes first. Tests wait for
// conditions only this way: never by sleeping and then asserting.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(eventuallyEvery)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			if cond() {
				return
			}
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		case <-tick.C:
		}
	}
}

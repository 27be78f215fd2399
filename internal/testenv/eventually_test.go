package testenv

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fatalTB is a testing.TB whose Fatalf records its message and ends the
// calling goroutine, as testing's does.
type fatalTB struct {
	testing.TB
	msg string
}

func (*fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// runEventually runs Eventually on a fatalTB and returns what Fatalf said
// ("" if it returned) and how long it took.
func runEventually(timeout time.Duration, what string, cond func() bool) (string, time.Duration) {
	tb := &fatalTB{}
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		Eventually(tb, timeout, what, cond)
	}()
	<-done
	return tb.msg, time.Since(start)
}

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	msg, _ := runEventually(10*time.Second, "the third call", func() bool { calls++; return calls == 3 })
	if msg != "" || calls != 3 {
		t.Fatalf("Eventually failed with %q after %d calls; want a return at the third call", msg, calls)
	}
}

func TestEventuallyFailsNamingWhatItWaitedFor(t *testing.T) {
	msg, took := runEventually(50*time.Millisecond, "the impossible", func() bool { return false })
	if !strings.Contains(msg, "the impossible") || !strings.Contains(msg, "50ms") {
		t.Fatalf("Eventually failed with %q; want the timeout and what it waited for", msg)
	}
	if took < 50*time.Millisecond {
		t.Fatalf("Eventually gave up after %s, before its 50ms timeout", took)
	}
}

package integration

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/testenv"
)

// forwardTimes records when each job of a tenant was forwarded, as a plain
// subscription to done.> receives it.
type forwardTimes struct {
	mu    sync.Mutex
	times []time.Time
}

// add records one forward at now.
func (f *forwardTimes) add(now time.Time) {
	f.mu.Lock()
	f.times = append(f.times, now)
	f.mu.Unlock()
}

// between counts the forwards in [from, to).
func (f *forwardTimes) between(from, to time.Time) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, at := range f.times {
		if !at.Before(from) && at.Before(to) {
			n++
		}
	}
	return n
}

// TestLiveLimitChangeAcrossProcesses: three worker processes of the binary
// share a tenant published at 300/s under 100/s. `throttler limits set`
// lowers its limit to 20/s mid-run, then raises it to 200/s. Within 1 s of
// each change the fleet holds the tenant to the new limit, its backlog of
// jobs holding slots of the old limit (reserved up to the default 10
// minutes ahead) included; in the first 200 ms after each, it admits no
// more than the new limit allows from the carried-over level (an empty
// bucket: the tenant is saturated), so a change never hands out a fresh
// burst.
func TestLiveLimitChangeAcrossProcesses(t *testing.T) {
	// Every server a process of its own: an in-process nats-server would
	// run under the race detector with the test, slower than in production.
	bin, natsServer := buildThrottler(t), buildNATSServer(t)
	natsURL := startNATSProcess(t, natsServer)
	rs := testenv.StartRedis(t)
	nc, err := nats.Connect(natsURL)
	must(t, err, "connect")
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(maxAsyncPublishes))
	must(t, err, "jetstream")
	const (
		oldRate = 100.0
		low     = 20.0
		high    = 200.0
	)
	vars := map[string]string{
		"NATS_URL":                  natsURL,
		"REDIS_URL":                 rs.URL(),
		"THROTTLER_TENANT_LIMITS":   "acme=100/s",
		"THROTTLER_MAX_ACK_PENDING": "5000",
		"THROTTLER_LOG_LEVEL":       "info",
	}
	var fwd forwardTimes
	sub, err := nc.Subscribe("done.acme", func(*nats.Msg) { fwd.add(time.Now()) })
	must(t, err, "subscribe done.acme")
	must(t, sub.SetPendingLimits(-1, -1), "pending limits")
	defer func() { _ = sub.Unsubscribe() }()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs []*testenv.Buffer
	for range 3 {
		cmd, _, stderr := throttlerCmd(ctx, bin, vars)
		must(t, cmd.Start(), "start throttler")
		logs = append(logs, stderr)
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	testenv.Eventually(t, 30*time.Second, "three workers running", func() bool {
		for _, l := range logs {
			if !strings.Contains(l.String(), "worker running") {
				return false
			}
		}
		return true
	})

	// 3 jobs every 10 ms until the test ends.
	pubDone := make(chan struct{})
	var pubErr error
	go func() {
		defer close(pubDone)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for range 3 {
				if _, err := js.PublishMsgAsync(&nats.Msg{Subject: "jobs.acme.x", Data: []byte("x")}); err != nil {
					pubErr = err
					return
				}
			}
		}
	}()

	kv, err := js.KeyValue(ctx, "throttler_limits")
	must(t, err, "the limits bucket the workers created")
	// set changes acme's limit with the CLI and returns when the server
	// stored the change.
	set := func(spec string) time.Time {
		t.Helper()
		if status, out, errOut := runCLI(t, bin, vars, "limits", "set", "acme", spec); status != 0 {
			t.Fatalf("limits set acme %s: status %d\n%s%s", spec, status, out, errOut)
		}
		e, err := kv.Get(ctx, "acme")
		must(t, err, "get acme")
		return e.Created()
	}
	rate := func(from time.Time, d time.Duration) float64 {
		return float64(fwd.between(from, from.Add(d))) / d.Seconds()
	}
	waitUntil := func(at time.Time) { time.Sleep(time.Until(at)) }

	// 3 s at 100/s: the tenant is saturated, its slots reserved seconds
	// ahead.
	time.Sleep(3 * time.Second)
	before := rate(time.Now().Add(-2*time.Second), 2*time.Second)

	lowered := set(fmt.Sprintf("%g/s", low))
	waitUntil(lowered.Add(11 * time.Second))
	first := fwd.between(lowered, lowered.Add(200*time.Millisecond))
	held := rate(lowered.Add(time.Second), 10*time.Second)

	raised := set(fmt.Sprintf("%g/s", high))
	waitUntil(raised.Add(3 * time.Second))
	firstHigh := fwd.between(raised, raised.Add(200*time.Millisecond))
	risen := rate(raised.Add(time.Second), 2*time.Second)
	cancel()
	<-pubDone
	if pubErr != nil {
		t.Fatalf("publish: %v", pubErr)
	}

	t.Logf("before: %.1f/s; lowered to %g/s: %d in the first 200 ms, %.1f/s over [1 s, 11 s); raised to %g/s: %d in the first 200 ms, %.1f/s over [1 s, 3 s)",
		before, low, first, held, high, firstHigh, risen)
	for i, l := range logs {
		for _, spec := range []string{"20/s:20", "200/s:200"} {
			if !strings.Contains(l.String(), `msg="limit set" key=acme spec=`+spec) {
				t.Errorf("worker %d did not log applying %s", i, spec)
			}
		}
	}
	if before < oldRate*0.9 || before > oldRate*1.1 {
		t.Errorf("before the change: %.1f/s, want the tenant saturated at %g/s", before, oldRate)
	}
	if held < low*0.97 || held > low*1.03 {
		t.Errorf("after lowering to %g/s: %.1f/s over the 10 s from 1 s after the change, want within 3%%", low, held)
	}
	// Risen at once: near the new rate a second on. A bucket that filled
	// while the workers lagged may let a window run above the rate, but
	// never the three seconds from the change above what they allow from
	// an empty bucket.
	if risen < high*0.95 {
		t.Errorf("after raising to %g/s: %.1f/s over the 2 s from 1 s after the change, want at least 95%%", high, risen)
	}
	if n, most := fwd.between(raised, raised.Add(3*time.Second)), int(math.Floor(high*3+low*0.03))+1; n > most {
		t.Errorf("the 3 s after raising to %g/s: %d forwarded, the limit allows %d", high, n, most)
	}
	// In its first 200 ms a change admits what the new rate gives an
	// empty bucket, and what the old rate admits while the workers apply
	// the change and forward the jobs admitted just before it (30 ms
	// here); a fresh bucket would add the whole new burst.
	bound := func(oldRate, newRate float64) int { return int(newRate*0.2+oldRate*0.03) + 1 }
	if b := bound(oldRate, low); first > b {
		t.Errorf("first 200 ms after lowering: %d admitted, want at most %d", first, b)
	}
	if b := bound(low, high); firstHigh > b {
		t.Errorf("first 200 ms after raising: %d admitted, want at most %d", firstHigh, b)
	}
}

package integration

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/testenv"
)

// TestEnvironmentRollout: a rollout that lowers a tenant's limit in the
// environment, as Kubernetes rolls a Deployment. A worker with
// THROTTLER_TENANT_LIMITS=acme=20/s:20 runs acme's flood (published at
// 40/s); a second worker starts with acme=5/s:5. The first applies the
// newer worker's limits within moments (it says so), so the two hold acme
// to 5/s together, its burst the most above it: without that, each would
// rebase acme's bucket to its own rate at its turn, forgiving the slots
// the other reserved, and acme would run above both limits. Once the
// newer worker stops, the first goes back to its own limit, 20/s.
func TestEnvironmentRollout(t *testing.T) {
	bin, natsServer := buildThrottler(t), buildNATSServer(t)
	natsURL := startNATSProcess(t, natsServer)
	rs := testenv.StartRedis(t)
	nc, err := nats.Connect(natsURL)
	must(t, err, "connect")
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(maxAsyncPublishes))
	must(t, err, "jetstream")
	vars := func(limits string) map[string]string {
		return map[string]string{
			"NATS_URL": natsURL, "REDIS_URL": rs.URL(),
			"THROTTLER_TENANT_LIMITS":   limits,
			"THROTTLER_MAX_ACK_PENDING": "5000",
			"THROTTLER_LOG_LEVEL":       "info",
		}
	}
	var fwd forwardTimes
	sub, err := nc.Subscribe("done.acme", func(*nats.Msg) { fwd.add(time.Now()) })
	must(t, err, "subscribe done.acme")
	must(t, sub.SetPendingLimits(-1, -1), "pending limits")
	defer func() { _ = sub.Unsubscribe() }()
	start := func(limits string) (stop func(), log *testenv.Buffer) {
		cmd, _, stderr := throttlerCmd(context.Background(), bin, vars(limits))
		must(t, cmd.Start(), "start throttler")
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		testenv.Eventually(t, 30*time.Second, "worker running", func() bool { return strings.Contains(stderr.String(), "worker running") })
		return func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }, stderr
	}
	_, oldLog := start("acme=20/s:20")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		tick := time.NewTicker(25 * time.Millisecond) // 40/s
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if _, err := js.PublishMsgAsync(&nats.Msg{Subject: "jobs.acme.x", Data: []byte("x")}); err != nil {
				return
			}
		}
	}()
	testenv.Eventually(t, 30*time.Second, "acme running", func() bool { return fwd.between(time.Time{}, time.Now()) >= 20 })

	stopNew, _ := start("acme=5/s:5")
	rolled := time.Now()
	testenv.Eventually(t, 10*time.Second, "the first worker applying the newer one's limits", func() bool {
		return strings.Contains(oldLog.String(), "this worker applies theirs")
	})
	const window = 6 * time.Second
	from := rolled.Add(2 * time.Second)
	time.Sleep(time.Until(from.Add(window)) + 500*time.Millisecond)
	during := fwd.between(from, from.Add(window))
	t.Logf("acme during the rollout: %d in %v", during, window)
	if max := 5*6 + 5; during > max {
		t.Errorf("acme ran %d jobs in %v while the workers were rolled to 5/s:5: over its limit (at most %d)", during, window, max)
	}
	if during < 24 {
		t.Errorf("acme ran %d jobs in %v while the workers were rolled to 5/s:5: want about 30", during, window)
	}

	stopNew()
	testenv.Eventually(t, 15*time.Second, "the first worker back to its own limits", func() bool {
		return strings.Contains(oldLog.String(), "own environment apply again")
	})
	back := time.Now().Add(2 * time.Second)
	const alone = 3 * time.Second
	time.Sleep(time.Until(back.Add(alone)) + 500*time.Millisecond)
	after := fwd.between(back, back.Add(alone))
	t.Logf("acme after: %d in %v", after, alone)
	if after < 48 || after > 20*3+20 {
		t.Errorf("acme ran %d jobs in %v once the first worker was alone again at 20/s:20: want about 60", after, alone)
	}
}

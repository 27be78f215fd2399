package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/internal/ops"
	"github.com/throttler/throttler/internal/testenv"
)

// TestReplayKilled: 1,000 jobs dead-lettered by a worker; `throttler dlq
// replay` is SIGKILLed mid-replay, then run again: every job is stored
// back once, every dead letter is gone, and a worker runs each job
// exactly once, as a job of its tenant.
func TestReplayKilled(t *testing.T) {
	e := setup(t)
	bin := buildThrottler(t)
	vars := map[string]string{
		"NATS_URL":                   e.natsURL,
		"REDIS_URL":                  e.redis.URL(),
		"THROTTLER_DEFAULT_LIMIT":    "100000/s",
		"THROTTLER_LIMITS_BUCKET":    "off",
		"THROTTLER_SHUTDOWN_TIMEOUT": "5s",
		"THROTTLER_LOG_LEVEL":        "error",
	}
	cfg := e.config(vars)
	e.ensureStream(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const n = 1000
	w := e.startWorker(cfg, func(context.Context, consumer.Job) error {
		return consumer.Permanent(errors.New("endpoint refused the job"))
	})
	for i := range n {
		e.publish(fmt.Sprintf("jobs.acme.%d", i%7), nil, []byte(fmt.Sprint(i)))
	}
	testenv.Eventually(t, time.Minute, "every job dead-lettered", func() bool { return w.stats()["acme"].DeadLettered == n })
	w.stop(t)
	dlq, err := e.js.Stream(ctx, cfg.Stream+"_DLQ")
	must(t, err, "the dead-letter stream")
	count := func() uint64 {
		info, err := dlq.Info(ctx)
		must(t, err, "dead-letter stream info")
		return info.State.Msgs
	}
	if c := count(); c != n {
		t.Fatalf("%d dead letters, want %d", c, n)
	}

	// The listing and one dead letter, as an on-call engineer reads them.
	var listed []ops.DeadLetter
	runJSON(t, bin, vars, &listed, "dlq", "list", "--tenant", "acme", "--reason", "REFUSED", "--limit", "5", "--json")
	if len(listed) != 5 || listed[0].Tenant != "acme" || !strings.Contains(listed[0].Reason, "endpoint refused the job") || !strings.HasPrefix(listed[0].Subject, "jobs.acme.") || listed[0].Size < 1 || listed[0].Failures != 1 {
		t.Errorf("dlq list: %+v", listed)
	}
	status, out, errOut := runCLI(t, bin, vars, "dlq", "show", fmt.Sprint(listed[0].ID))
	if status != 0 || !strings.Contains(out, "Throttler-Reason: ") || !strings.Contains(out, listed[0].Subject+" (where replay publishes it)") {
		t.Errorf("dlq show: status %d\n%s%s", status, out, errOut)
	}
	if status, _, errOut := runCLI(t, bin, vars, "dlq", "show", "999999"); status != 2 || !strings.Contains(errOut, "not found") {
		t.Errorf("dlq show of an unknown id: status %d, %q; want 2", status, errOut)
	}
	if status, out, _ := runCLI(t, bin, vars, "dlq", "purge", "--tenant", "acme"); status != 0 || !strings.Contains(out, "would remove 1000 dead letters") || count() != n {
		t.Errorf("dlq purge without --yes: status %d, %q, %d dead letters left", status, out, count())
	}

	// Killed mid-replay: once half the dead letters are gone.
	cmd, _, stderr := throttlerCmd(ctx, bin, vars, "dlq", "replay", "--tenant", "acme")
	must(t, cmd.Start(), "start the replay")
	var left uint64
	for left = count(); left > n/2; left = count() {
		if ctx.Err() != nil {
			t.Fatal("the replay removed no dead letter")
		}
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	left = count()
	t.Logf("killed with %d dead letters left; stderr: %s", left, stderr.String())
	if left == 0 {
		t.Fatal("the replay ended before the kill: the test shows nothing")
	}

	var rep ops.ReplayReport
	start := time.Now()
	runJSON(t, bin, vars, &rep, "dlq", "replay", "--json")
	took := time.Since(start)
	again := 0
	for _, r := range rep.Replayed {
		if r.Again {
			again++
		}
	}
	t.Logf("second run: %d replayed in %v, %d of them stored by the killed run already; duplicate window %v", len(rep.Replayed), took.Round(time.Millisecond), again, rep.DuplicateWindow)
	// A delete the killed run sent just before the kill may reach the
	// server after the count above: the second run then finds one fewer.
	// Every job is checked to run exactly once below.
	if uint64(len(rep.Replayed)) > left || uint64(len(rep.Replayed)) < left-1 || count() != 0 {
		t.Errorf("second run replayed %d of the %d left; %d dead letters remain", len(rep.Replayed), left, count())
	}

	// A worker runs each job once.
	var mu sync.Mutex
	ran := map[string]int{}
	w2 := e.startWorker(cfg, func(_ context.Context, j consumer.Job) error {
		mu.Lock()
		defer mu.Unlock()
		if j.Tenant == "acme" && j.Header.Get(header.ReplayedFrom) != "" {
			ran[string(j.Data)]++
		}
		return nil
	})
	testenv.Eventually(t, time.Minute, "every replayed job run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) == n
	})
	e.waitSettled(t, cfg, time.Minute)
	w2.stop(t)
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		if c := ran[fmt.Sprint(i)]; c != 1 {
			t.Errorf("job %d ran %d times, want once", i, c)
		}
	}
	if got := e.subjectCount(cfg.Stream, "jobs.>"); got != 2*n {
		t.Errorf("the jobs stream holds %d jobs, want the %d originals and %d replayed copies", got, n, n)
	}
}

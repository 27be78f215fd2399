package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/limits"
)

// movedBacklog is a worker whose tenant acme, limited to 2/s:2 in the
// limits bucket (its own key, or _default), has most of 60 jobs moved off
// the consumer for their slots (30 s for the last).
type movedBacklog struct {
	e    *env
	cfg  *app.Settings
	w    *worker
	kv   jetstream.KeyValue
	logs *logBuffer
	done *collector
	want map[string]bool
}

// newMovedBacklog starts a worker, writes 2/s:2 under key (acme, or
// _default) and moves acme's backlog off the consumer.
func newMovedBacklog(t *testing.T, key string) *movedBacklog {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "1000/s"})
	kv := e.limitsBucket(cfg.LimitsBucket)
	w, logs := e.startWorkerLogged(cfg, nil)
	e.waitBuilt(w)
	done := e.collect("done.>")
	rev := put(t, kv, key, "2/s:2")
	waitApplied(t, logs, key, "2/s:2", rev)

	const jobs = 60
	want := e.publishJobs(cfg.Stream, "jobs.acme.a", nil, jobs)
	st, err := e.js.Stream(context.Background(), cfg.Stream)
	must(t, err, "jobs stream")
	testenv.Eventually(t, 20*time.Second, "most of acme's backlog moved off the consumer", func() bool {
		info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(cfg.Schedules.All()))
		return err == nil && info.State.Msgs > 0 && w.stats()["acme"].Deferred >= jobs-10
	})
	if n := len(done.all()); n > 10 {
		t.Fatalf("%d of acme's jobs ran under 2/s:2 before the change, want a backlog", n)
	}
	return &movedBacklog{e: e, cfg: cfg, w: w, kv: kv, logs: logs, done: done, want: want}
}

// ranOnce waits for every job of the backlog to run, within, and checks
// that each ran once.
func (b *movedBacklog) ranOnce(t *testing.T, within time.Duration) {
	t.Helper()
	for _, m := range b.done.waitCount(t, len(b.want), within) {
		if !b.want[m.jobID] {
			t.Fatalf("job %q forwarded twice, or unknown", m.jobID)
		}
		delete(b.want, m.jobID)
	}
}

// TestRaisedLimitBringsTheBacklogBack: a tenant's backlog moved off the
// consumer for slots under 2/s runs at once when `throttler limits set`
// raises its limit to 1000/s, as a customer who changes plan expects, not
// at 2/s as each slot reserved under the old limit comes (30 s for 60
// jobs). The command says how many jobs it brought back; each job runs
// once.
func TestRaisedLimitBringsTheBacklogBack(t *testing.T) {
	b := newMovedBacklog(t, "acme")
	bin := buildThrottler(t)
	cli := map[string]string{"NATS_URL": b.e.natsURL, "REDIS_URL": b.e.redis.URL(), "THROTTLER_DEFAULT_LIMIT": "1000/s"}
	status, stdout, stderr := runCLI(t, bin, cli, "limits", "set", "acme", "1000/s")
	if status != 0 || !strings.Contains(stdout, "jobs waiting for slots under its old limits brought back") {
		t.Fatalf("limits set acme 1000/s: status %d\n%s\n%s", status, stdout, stderr)
	}
	t.Logf("limits set acme 1000/s:\n%s", stdout)
	// Under 2/s the last job's slot is 30 s after the first's: the backlog
	// runs within seconds of the change only if it was brought back.
	b.ranOnce(t, 10*time.Second)
}

// TestBucketLimitRaiseBringsTheBacklogBack: a raise written straight into
// the limits bucket (as `nats kv put` or an operator's program writes it)
// brings the moved backlog back too: the workers do it themselves, a few
// seconds after the write, and say so in their log. Each job runs once.
func TestBucketLimitRaiseBringsTheBacklogBack(t *testing.T) {
	b := newMovedBacklog(t, "acme")
	put(t, b.kv, "acme", "1000/s")
	// The workers' pass comes 3 to 5 s after the change.
	b.ranOnce(t, 12*time.Second)
	if !strings.Contains(b.logs.String(), "its jobs moved under the old ones brought back") {
		t.Fatalf("the worker's log does not say it brought acme's jobs back:\n%s", b.logs.String())
	}
}

// TestBucketLimitRaiseWhileTheFleetIsDownBringsTheBacklogBack: a raise
// written into the bucket while no worker runs is brought back by the
// workers that start after it, which did not see it happen.
func TestBucketLimitRaiseWhileTheFleetIsDownBringsTheBacklogBack(t *testing.T) {
	b := newMovedBacklog(t, "acme")
	b.w.stop(t)
	put(t, b.kv, "acme", "1000/s")
	w, logs := b.e.startWorkerLogged(b.cfg, nil)
	b.e.waitBuilt(w)
	// Under 2/s the last job's slot is 30 s after the first's; the new
	// worker's pass comes 3 to 5 s after it starts.
	b.ranOnce(t, 15*time.Second)
	if !strings.Contains(logs.String(), "its jobs moved under the old ones brought back") {
		t.Fatalf("the new worker's log does not say it brought acme's jobs back:\n%s", logs.String())
	}
}

// TestBucketDefaultRaiseBringsTheBacklogBack: a raise of _default written
// into the bucket brings back the moved backlog of a tenant under the
// default, as a tenant's own key does: a free tier raised for everyone.
func TestBucketDefaultRaiseBringsTheBacklogBack(t *testing.T) {
	b := newMovedBacklog(t, limits.DefaultKey)
	put(t, b.kv, limits.DefaultKey, "1000/s")
	// Under 2/s the last job's slot is 30 s after the first's; the
	// workers' pass comes 3 to 5 s after the change.
	b.ranOnce(t, 12*time.Second)
	if !strings.Contains(b.logs.String(), "its jobs moved under the old ones brought back") {
		t.Fatalf("the worker's log does not say it brought acme's jobs back:\n%s", b.logs.String())
	}
}

// TestBucketLimitRaiseAfterARestartBringsTheBacklogBack: a limit of its
// own written into the bucket for a tenant under the default, after the
// fleet restarted (a deploy), brings back the backlog its predecessors
// moved, which the new workers' rows do not count.
func TestBucketLimitRaiseAfterARestartBringsTheBacklogBack(t *testing.T) {
	// Under _default: a tenant's key written before the start would be
	// passed at the start anyway (TestBucketLimitRaiseWhileTheFleetIsDown…).
	b := newMovedBacklog(t, limits.DefaultKey)
	// Every job not run is moved: the new worker finds none of acme's on
	// its consumer to move, and its rows do not count acme.
	b.e.waitIdle(t, 20*time.Second, b.cfg.Stream, b.cfg.Consumer)
	b.w.stop(t)
	w, logs := b.e.startWorkerLogged(b.cfg, nil)
	b.e.waitBuilt(w)
	put(t, b.kv, "acme", "1000/s")
	// Under 2/s the last job's slot is 30 s after the first's; the new
	// worker's pass comes 3 to 5 s after the change.
	b.ranOnce(t, 15*time.Second)
	if !strings.Contains(logs.String(), "its jobs moved under the old ones brought back") {
		t.Fatalf("the new worker's log does not say it brought acme's jobs back:\n%s", logs.String())
	}
}

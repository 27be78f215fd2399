package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/limits"
)

// limitsBucket opens the test's limits bucket as an operator would.
func (e *env) limitsBucket(name string) jetstream.KeyValue {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := limits.OpenBucket(ctx, e.js, name, 1)
	must(e.t, err, "open the limits bucket")
	return kv
}

// put writes a value to the limits bucket.
func put(t *testing.T, kv jetstream.KeyValue, key, value string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rev, err := kv.PutString(ctx, key, value)
	must(t, err, "put %s=%s", key, value)
	return rev
}

// waitApplied waits until the worker logging to logs has applied spec for
// key at revision rev.
func waitApplied(t *testing.T, logs *logBuffer, key, spec string, rev uint64) {
	t.Helper()
	line := fmt.Sprintf(`msg="limit set" key=%s spec=%s revision=%d`, key, spec, rev)
	testenv.Eventually(t, 5*time.Second, "the worker applies "+key+"="+spec, func() bool { return logs.contains(line) })
}

// TestBucketLimitsApplyLive: a worker applies a tenant's limit from the
// bucket at once, ignores a bad value (keeping the limit, naming the key in
// its log and counting it), gives the tenant back the environment's limit
// when its key is deleted, and takes _default for every tenant without a
// limit of its own.
func TestBucketLimitsApplyLive(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{
		"THROTTLER_DEFAULT_LIMIT": "1000/s",
		"THROTTLER_TENANT_LIMITS": "globex=1000/s",
	})
	kv := e.limitsBucket(cfg.LimitsBucket)
	w, logs := e.startWorkerLogged(cfg, nil)
	e.waitBuilt(w)
	done := e.collect("done.>")

	// A limit set while the worker runs: 3 at once, then one a minute.
	rev := put(t, kv, "acme", "1/m:3")
	waitApplied(t, logs, "acme", "1/m:3", rev)
	e.publishJobs(cfg.Stream, "jobs.acme.a", nil, 10)
	done.waitCount(t, 3, 10*time.Second)
	testenv.Eventually(t, 10*time.Second, "7 of acme's jobs deferred", func() bool { return w.stats()["acme"].Deferred >= 7 })
	if got := countTenant(done.all(), "acme"); got != 3 {
		t.Fatalf("acme: %d forwarded under 1/m:3, want the burst of 3", got)
	}

	// A bad value changes nothing, and says so.
	put(t, kv, "acme", "lots/s")
	testenv.Eventually(t, 5*time.Second, "the bad value logged with its key", func() bool {
		return logs.contains("ignoring a bad value in the limits bucket") && logs.contains(`key=acme value=lots/s`)
	})
	testenv.Eventually(t, 5*time.Second, "the bad value counted", func() bool { return w.stats()["acme"].BadLimits == 1 })
	e.publishJobs(cfg.Stream, "jobs.acme.b", nil, 2)
	testenv.Eventually(t, 10*time.Second, "acme still held to 1/m", func() bool { return w.stats()["acme"].Deferred >= 9 })
	if got := countTenant(done.all(), "acme"); got != 3 {
		t.Fatalf("acme after a bad value: %d forwarded, want still 3", got)
	}

	// Deleting the key gives acme the environment's 1000/s: new jobs run
	// at once (the jobs holding slots of 1/m keep them).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	must(t, kv.Delete(ctx, "acme"), "delete acme")
	testenv.Eventually(t, 5*time.Second, "the removal applied", func() bool { return logs.contains(`msg="limit removed; the environment's applies" key=acme`) })
	e.publishJobs(cfg.Stream, "jobs.acme.c", nil, 5)
	done.waitCount(t, 3+5, 10*time.Second)

	// _default: a tenant without a limit of its own takes it; one listed
	// in THROTTLER_TENANT_LIMITS keeps its own.
	rev = put(t, kv, limits.DefaultKey, "1/m:1")
	waitApplied(t, logs, "_default", "1/m:1", rev)
	e.publishJobs(cfg.Stream, "jobs.zed.a", nil, 3)
	e.publishJobs(cfg.Stream, "jobs.globex.a", nil, 3)
	done.waitCount(t, 3+5+1+3, 10*time.Second)
	testenv.Eventually(t, 10*time.Second, "2 of zed's jobs deferred", func() bool { return w.stats()["zed"].Deferred >= 2 })
	if z, g := countTenant(done.all(), "zed"), countTenant(done.all(), "globex"); z != 1 || g != 3 {
		t.Fatalf("under _default 1/m:1: zed forwarded %d (want 1), globex %d (want its own 1000/s: 3)", z, g)
	}
	if s := w.stats()["globex"]; s.Deferred != 0 {
		t.Fatalf("globex deferred %d times under its own 1000/s", s.Deferred)
	}
}

// TestBucketLimitsBeforeStart: limits already in the bucket apply to the
// first decision, and a bad value found at start gives way to the key's
// latest good one.
func TestBucketLimitsBeforeStart(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "1000/s"})
	e.ensureStream(cfg)
	kv := e.limitsBucket(cfg.LimitsBucket)
	put(t, kv, "acme", "1/m:2")
	put(t, kv, "acme", "2/parsec")
	put(t, kv, "initech", "1/m:1")
	e.publishJobs(cfg.Stream, "jobs.acme.a", nil, 5)
	e.publishJobs(cfg.Stream, "jobs.initech.a", nil, 3)

	w, logs := e.startWorkerLogged(cfg, nil)
	done := e.collect("done.>")
	done.waitCount(t, 3, 10*time.Second)
	testenv.Eventually(t, 10*time.Second, "the jobs decided", func() bool {
		s := w.stats()
		return s["acme"].Deferred >= 3 && s["initech"].Deferred >= 2
	})
	if a, i := countTenant(done.all(), "acme"), countTenant(done.all(), "initech"); a != 2 || i != 1 {
		t.Fatalf("forwarded acme %d (want 2, its latest good limit 1/m:2), initech %d (want 1)", a, i)
	}
	if !logs.contains(`msg="applying the latest good value of a bad key" key=acme spec=1/m:2`) {
		t.Fatalf("no log of acme's latest good value")
	}
}

// TestBucketLimitsAcrossANATSRestart: while NATS is away the worker keeps
// the limits it has; once NATS is back, a change made then applies, without
// a restart of the worker.
func TestBucketLimitsAcrossANATSRestart(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "1000/s"})
	kv := e.limitsBucket(cfg.LimitsBucket)
	put(t, kv, "acme", "1/m:1")
	w, logs := e.startWorkerLogged(cfg, nil)
	e.waitBuilt(w)

	e.nats.Shutdown(t)
	e.nats.Restart(t)
	testenv.Eventually(t, 10*time.Second, "the test's connection back", e.nc.IsConnected)
	var rev uint64
	testenv.Eventually(t, 10*time.Second, "a put after the restart", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		r, err := kv.PutString(ctx, "acme", "2/m:2")
		rev = r
		return err == nil
	})
	waitApplied(t, logs, "acme", "2/m:2", rev)
}

// TestShadowCountsTheDeferralsEnforcingMakes: the same workload published
// for a tenant enforced and one in shadow mode: the shadow tenant's jobs
// all run at once, and the worker counts as many shadow-limited jobs as the
// enforced tenant has deferrals, within 1%.
func TestShadowCountsTheDeferralsEnforcingMakes(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{
		"THROTTLER_TENANT_LIMITS":   "real=50/s:10,shadow=50/s:10+shadow",
		"THROTTLER_MAX_ACK_PENDING": "5000",
	})
	w := e.startWorker(cfg, nil)
	e.waitBuilt(w)
	done := e.collect("done.>")
	// 150/s for each for 4 s: 600 jobs each, 3× the limit.
	const perTick, ticks = 15, 40
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for range ticks {
		<-tick.C
		e.publishJobs(cfg.Stream, "jobs.real.x", nil, perTick)
		e.publishJobs(cfg.Stream, "jobs.shadow.x", nil, perTick)
	}
	testenv.Eventually(t, 10*time.Second, "every shadow job forwarded", func() bool {
		return countTenant(done.all(), "shadow") == perTick*ticks
	})
	// Every enforced job forwarded: each was decided once, then (when
	// deferred) admitted for its slot.
	testenv.Eventually(t, 30*time.Second, "every enforced job forwarded", func() bool {
		return countTenant(done.all(), "real") == perTick*ticks
	})
	enforced, shadow := w.stats()["real"], w.stats()["shadow"]
	if shadow.Deferred != 0 || shadow.Admitted != perTick*ticks {
		t.Fatalf("shadow tenant: %+v, want every job admitted, none deferred", shadow)
	}
	diff := float64(shadow.ShadowLimited-enforced.Deferred) / float64(enforced.Deferred)
	t.Logf("enforced: %d deferrals; shadow: %d limited, %.1fs of waits spared", enforced.Deferred, shadow.ShadowLimited, shadow.ShadowWait.Seconds())
	if enforced.Deferred < 300 || diff < -0.01 || diff > 0.01 {
		t.Fatalf("shadow counted %d limited against %d enforced deferrals (%+.2f%%), want within 1%%", shadow.ShadowLimited, enforced.Deferred, 100*diff)
	}
}

// countTenant counts the collected messages of tenant.
func countTenant(msgs []collected, tenant string) int {
	n := 0
	for _, m := range msgs {
		if m.tenant == tenant {
			n++
		}
	}
	return n
}

// TestChangedPeriodCarriesTheBucketOver: a tenant's limit changed to
// another period keeps the tokens its bucket held (at most the new burst)
// rather than starting a full bucket of the new limit.
func TestChangedPeriodCarriesTheBucketOver(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "1000/s"})
	kv := e.limitsBucket(cfg.LimitsBucket)
	w, logs := e.startWorkerLogged(cfg, nil)
	e.waitBuilt(w)
	done := e.collect("done.>")

	rev := put(t, kv, "acme", "10/m:10")
	waitApplied(t, logs, "acme", "10/m:10", rev)
	e.publishJobs(cfg.Stream, "jobs.acme.a", nil, 4)
	done.waitCount(t, 4, 10*time.Second)

	// 10 a minute is 600 an hour: the hour's bucket starts with the 6
	// tokens left, not a burst of 10.
	rev = put(t, kv, "acme", "600/h:10")
	waitApplied(t, logs, "acme", "600/h:10", rev)
	e.publishJobs(cfg.Stream, "jobs.acme.b", nil, 10)
	done.waitCount(t, 4+6, 10*time.Second)
	testenv.Eventually(t, 10*time.Second, "4 of acme's new jobs deferred", func() bool { return w.stats()["acme"].Deferred >= 4 })
	if got := countTenant(done.all(), "acme"); got != 4+6 {
		t.Fatalf("acme: %d forwarded, want 4 under 10/m:10 and the 6 tokens carried over to 600/h:10", got)
	}
}

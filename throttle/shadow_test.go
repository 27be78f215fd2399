package throttle_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/throttler/throttler/throttle"
)

// A shadow policy admits every job and says what enforcing would have
// done, job for job the same as the enforced decisions of the same jobs.
func TestShadowCountsWhatEnforcingWouldDo(t *testing.T) {
	e := setup(t)
	limit := throttle.PerSecond(10, 5)
	enforced := newLimiter(t, e.rdb, e.prefix+"e", time.Minute, throttle.Limits{limit})
	shadowed, _ := newLiveLimiter(t, env{rdb: e.rdb, prefix: e.prefix + "s"}, time.Minute, throttle.Policy{Limits: throttle.Limits{limit}, Shadow: true})
	for i := range 40 {
		at := t0.Add(time.Duration(i) * 20 * ms) // 50/s against 10/s
		req := throttle.Request{Tenant: "acme", JobID: fmt.Sprint("job-", i), At: at}
		want := decide(t, enforced, req)
		got := decide(t, shadowed, req)
		if got.Outcome != throttle.Admitted || !got.Shadow {
			t.Fatalf("job %d in shadow mode: %+v, want admitted in shadow", i, got)
		}
		switch want.Outcome {
		case throttle.Admitted:
			if got.ShadowWait != 0 {
				t.Fatalf("job %d: enforced admitted, shadow says it would wait %s", i, got.ShadowWait)
			}
		case throttle.Reserved:
			if got.ShadowWait != want.Wait {
				t.Fatalf("job %d: enforced reserved for %s, shadow says %s", i, want.Wait, got.ShadowWait)
			}
		default:
			t.Fatalf("job %d enforced: %+v", i, want)
		}
	}
}

// Shadow bookkeeping never touches the enforced buckets: turning shadow
// off finds the tenant's enforced bucket full, never in debt.
func TestShadowLeavesTheEnforcedBucketsAlone(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	limit := throttle.PerSecond(10, 5)
	l, live := newLiveLimiter(t, e, time.Minute, throttle.Policy{Limits: throttle.Limits{limit}, Shadow: true})
	c := newEngine(t, l)
	for i := range 30 {
		decide(t, l, throttle.Request{Tenant: "acme", JobID: fmt.Sprint("job-", i), At: t0})
		if d := decideCopy(t, c, throttle.Copy{Request: throttle.Request{Tenant: "acme", JobID: fmt.Sprint("copy-", i), At: t0}, Incarnation: 7}); d.Outcome != throttle.Admitted {
			t.Fatalf("copy %d in shadow mode: %+v, want admitted", i, d)
		}
	}
	ks := keys(t, e.rdb, e.prefix)
	slices.Sort(ks)
	for _, k := range ks {
		if strings.Contains(k, ":l:") || strings.Contains(k, ":j:") {
			t.Fatalf("shadow mode wrote %s; keys %v", k, ks)
		}
	}
	if n, err := e.rdb.Exists(ctx, e.prefix+":{acme}:s:1000000").Result(); err != nil || n != 1 {
		t.Fatalf("shadow bucket: EXISTS = %d, %v; want 1", n, err)
	}
	live.set(throttle.Enforce(limit))
	for i := range 5 {
		if d := decide(t, l, throttle.Request{Tenant: "acme", JobID: fmt.Sprint("after-", i), At: t0}); d.Outcome != throttle.Admitted || d.Shadow {
			t.Fatalf("job %d after shadow mode: %+v, want admitted from the full burst", i, d)
		}
	}
}

// A shadow decision without a job id and without a horizon charges only
// what fits, as Allow does, and still says how long the job would wait.
func TestShadowAllow(t *testing.T) {
	e := setup(t)
	// Per minute, so that the bucket cannot expire (by Redis's clock) between
	// the calls, which all carry t0.
	l, _ := newLiveLimiter(t, e, 0, throttle.Policy{Limits: throttle.Limits{throttle.PerMinute(10, 1)}, Shadow: true})
	for i := range 3 {
		d := decide(t, l, throttle.Request{Tenant: "acme", At: t0})
		want := throttle.Decision{Outcome: throttle.Admitted, Shadow: true}
		if i > 0 {
			want.ShadowWait = 6 * time.Second // uncharged: every later job is the second
		}
		sameDecision(t, fmt.Sprint("job ", i), d, want)
	}
}

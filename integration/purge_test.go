package integration

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/ops"
	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

// gated is an HTTP endpoint that answers every job at once but, once
// holding, those of one tenant, which it holds until the gate opens; it
// counts each job's requests by its Idempotency-Key.
type gated struct {
	tenant  string
	open    chan struct{}
	mu      sync.Mutex
	holding bool
	held    int
	done    map[string]int            // tenant → jobs answered
	keys    map[string]map[string]int // tenant → job id → requests
}

func newGated(tenant string) *gated {
	return &gated{tenant: tenant, open: make(chan struct{}), done: map[string]int{}, keys: map[string]map[string]int{}}
}

func (g *gated) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t := r.Header.Get("Throttler-Tenant")
	g.mu.Lock()
	if g.keys[t] == nil {
		g.keys[t] = map[string]int{}
	}
	g.keys[t][r.Header.Get("Idempotency-Key")]++
	hold := t == g.tenant && g.holding
	if hold {
		g.held++
	}
	g.mu.Unlock()
	if hold {
		select {
		case <-g.open:
		case <-r.Context().Done():
		}
	}
	g.mu.Lock()
	if hold {
		g.held--
	}
	g.done[t]++
	g.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// read returns the tenant's jobs answered, those held now, and the most
// requests any one job of it got.
func (g *gated) read(tenant string) (done, held, most int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, n := range g.keys[tenant] {
		most = max(most, n)
	}
	return g.done[tenant], g.held, most
}

// TestPurgeBacklog: acme has 10,000 jobs waiting: 5,999 moved under a
// limit of 1/h (in bundles), then, under running:2, 2 running (held by
// the endpoint) and 3,998 parked for a lease. `throttler purge acme --yes`
// removes every waiting one and counts each kind exactly, leaves the two
// running to finish, empties acme's waiting list in Redis, and leaves
// globex's 299 moved jobs as they were; a dry run removes nothing.
func TestPurgeBacklog(t *testing.T) {
	countsOnly(t)
	e := setup(t)
	bin := buildThrottler(t)
	srv := newGated("acme")
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	t.Cleanup(func() { // let held requests end before the server closes
		select {
		case <-srv.open:
		default:
			close(srv.open)
		}
	})
	vars := map[string]string{
		"NATS_URL":                   e.natsURL,
		"REDIS_URL":                  e.redis.URL(),
		"THROTTLER_DEFAULT_LIMIT":    "1/h:1",
		"THROTTLER_HANDLER":          "http",
		"THROTTLER_HTTP_URL":         hs.URL + "/jobs/{tenant}",
		"THROTTLER_HTTP_TIMEOUT":     "5m",
		"THROTTLER_LIMITS_BUCKET":    "off",
		"THROTTLER_SHUTDOWN_TIMEOUT": "5s",
		"THROTTLER_LOG_LEVEL":        "warn",
	}
	cfg := e.config(vars)
	e.ensureStream(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	fleet := cfg.Fleet(e.js)
	dry := func(tenant string) ops.PurgeReport {
		t.Helper()
		r, err := ops.PurgeTenant(ctx, fleet, ops.PurgeOptions{Tenant: tenant, DryRun: true})
		must(t, err, "dry run for %s", tenant)
		return r
	}

	// Phase 1: under 1/h, one job of each tenant runs, the rest move.
	w1 := e.startWorker(cfg, nil)
	publishMany(t, e.js, "jobs.acme", 6000)
	publishMany(t, e.js, "jobs.globex", 300)
	idle := func(w *worker, want map[string][2]int64, ackPending int) func() bool {
		return func() bool {
			st := w.stats()
			for tenant, n := range want {
				if st[tenant].Delivered != n[0] || st[tenant].Moved != n[1] {
					return false
				}
			}
			ci := e.consumerInfo(cfg.Stream, cfg.Consumer)
			return ci.NumPending == 0 && ci.NumAckPending == ackPending
		}
	}
	defer func() {
		if t.Failed() {
			ci := e.consumerInfo(cfg.Stream, cfg.Consumer)
			t.Logf("phase 1 stats: %+v, %+v; consumer pending %d, ack pending %d", w1.stats()["acme"], w1.stats()["globex"], ci.NumPending, ci.NumAckPending)
		}
	}()
	testenv.Eventually(t, 2*time.Minute, "phase 1's jobs moved", idle(w1, map[string][2]int64{"acme": {6000, 5999}, "globex": {300, 299}}, 0))
	if a, g := dry("acme"), dry("globex"); a.Moved != 5999 || g.Moved != 299 || a.Removed+g.Removed != 5999+299 {
		t.Fatalf("after phase 1: acme %+v, globex %+v; want 5,999 and 299 moved", a, g)
	}
	if n := e.subjectCount(cfg.Stream, "sched.b.acme.*"); n == 0 {
		t.Errorf("no bundle of acme's moved jobs: the purge of bundles goes untested")
	}
	t.Log("phase 1 moved")
	w1.stop(t)

	// Phase 2: acme capped at running:2, its endpoint holding its jobs.
	srv.mu.Lock()
	srv.holding = true
	srv.mu.Unlock()
	vars2 := maps.Clone(vars)
	vars2["THROTTLER_TENANT_LIMITS"] = "acme=1000/s+running:2"
	cfg2 := e.config(vars2)
	w2 := e.startWorker(cfg2, nil)
	publishMany(t, e.js, "jobs.acme", 4000)
	// Parked jobs come back after 2 minutes (unforetold): this must be
	// done by then.
	testenv.Eventually(t, time.Minute, "phase 2's jobs parked", func() bool {
		_, held, _ := srv.read("acme")
		return held == 2 && idle(w2, map[string][2]int64{"acme": {4000, 3998}}, 2)()
	})
	if r := dry("acme"); r.Moved != 5999 || r.Parked != 3998 || r.Removed != 9997 {
		t.Fatalf("after phase 2: acme %+v; want 5,999 moved and 3,998 parked", r)
	}
	t.Log("phase 2 parked")
	globexBefore := dry("globex")

	// A dry run, and the same without --yes, remove nothing.
	for _, args := range [][]string{{"purge", "acme", "--dry-run", "--yes", "--json"}, {"purge", "acme", "--json"}} {
		var r ops.PurgeReport
		runJSON(t, bin, vars2, &r, args...)
		if !r.DryRun || r.Removed != 9997 {
			t.Errorf("%v: %+v, want a dry run counting 9,997", args, r)
		}
	}
	var rep ops.PurgeReport
	start := time.Now()
	runJSON(t, bin, vars2, &rep, "purge", "acme", "--yes", "--json")
	t.Logf("purge in %v: %+v", time.Since(start).Round(time.Millisecond), rep)
	if rep.DryRun || rep.Moved != 5999 || rep.Parked != 3998 || rep.Pending+rep.Fast+rep.Woken != 0 || rep.Removed != 9997 {
		t.Errorf("purge counted %+v; want 5,999 moved and 3,998 parked, 9,997 in all", rep)
	}
	if rep.InFlight != 2 {
		t.Errorf("purge counted %d in flight, want the 2 running", rep.InFlight)
	}
	if rep.Unwaited != 3998 {
		t.Errorf("purge removed %d places from the waiting lists, want 3,998", rep.Unwaited)
	}
	if r := dry("acme"); r.Removed != 0 {
		t.Errorf("after the purge, acme still has %+v waiting", r)
	}
	lim, err := throttle.New(e.redisClient(cfg2), throttle.Options{Policies: cfg2.Rules, Prefix: cfg2.KeyPrefix})
	must(t, err, "limiter")
	snap, err := lim.Peek(ctx, "acme", time.Time{})
	must(t, err, "peek")
	if snap.Cap == nil || snap.Cap.Waiting != 0 || snap.Cap.Running != 2 {
		t.Errorf("acme's cap after the purge: %+v, want 2 running and none waiting", snap.Cap)
	}
	if g := dry("globex"); g.Moved != globexBefore.Moved || g.Removed != globexBefore.Removed {
		t.Errorf("globex had %+v waiting before acme's purge, %+v after", globexBefore, g)
	}

	// The two running finish; a new job of acme runs at once: no stale
	// place stands before it.
	close(srv.open)
	publishMany(t, e.js, "jobs.acme", 1)
	testenv.Eventually(t, 30*time.Second, "acme's running jobs and a new one done", func() bool {
		done, _, _ := srv.read("acme")
		return done == 4
	})
	if done, _, most := srv.read("acme"); done != 4 || most != 1 {
		t.Errorf("acme: %d jobs answered (want 1 + 2 + 1), at most %d requests for one job", done, most)
	}
}

// publishMany publishes n jobs with data on subj and waits for their acks.
func publishMany(t *testing.T, js jetstream.JetStream, subj string, n int) {
	t.Helper()
	acks := make([]jetstream.PubAckFuture, 0, n)
	for range n {
		f, err := js.PublishMsgAsync(&nats.Msg{Subject: subj, Data: []byte("x")})
		must(t, err, "publish")
		acks = append(acks, f)
	}
	for _, f := range acks {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatalf("publish: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("publish ack timed out")
		}
	}
}

// runJSON runs the binary with vars and args, expects status 0, and
// decodes its standard output into v.
func runJSON(t *testing.T, bin string, vars map[string]string, v any, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd, stdout, stderr := throttlerCmd(ctx, bin, vars, args...)
	if err := cmd.Run(); err != nil {
		t.Fatalf("throttler %v: %v\nstderr: %s", args, err, stderr.String())
	}
	if err := json.Unmarshal([]byte(stdout.String()), v); err != nil {
		t.Fatalf("throttler %v: %v\nstdout: %s", args, err, stdout.String())
	}
}

// TestPurgeOlderThan: --older-than removes only the jobs first published
// before the cut, wherever they wait: not yet delivered, or moved in
// bundles holding jobs from both sides of the cut (the younger ones stay,
// as scheduled copies of their own). Another tenant's jobs stay.
func TestPurgeOlderThan(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "1/h:1", "THROTTLER_LIMITS_BUCKET": "off"})
	e.ensureStream(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fleet := cfg.Fleet(e.js)

	// The worker starts once both halves are stored, so that it moves
	// them together, in bundles that straddle the cut.
	publishMany(t, e.js, "jobs.acme", 40)
	publishMany(t, e.js, "jobs.globex", 10)
	time.Sleep(50 * time.Millisecond) // the cut lies strictly between the halves
	cut := time.Now()
	time.Sleep(50 * time.Millisecond)
	publishMany(t, e.js, "jobs.acme", 30)
	w := e.startWorker(cfg, nil)
	testenv.Eventually(t, time.Minute, "the jobs moved", func() bool {
		st := w.stats()
		return st["acme"].Moved == 69 && st["globex"].Moved == 9
	})
	w.stop(t)
	if n := e.subjectCount(cfg.Stream, "sched.b.acme.*"); n == 0 {
		t.Fatal("no bundle of acme's jobs")
	}
	// Two more, younger than the cut, not yet delivered.
	publishMany(t, e.js, "jobs.acme", 2)

	rep, err := ops.PurgeTenant(ctx, fleet, ops.PurgeOptions{Tenant: "acme", Before: cut})
	must(t, err, "purge")
	// The first job ran (the burst); 39 of the first half were moved.
	if rep.Moved != 39 || rep.Pending != 0 || rep.Removed != 39 {
		t.Errorf("purge before the cut: %+v, want the 39 moved older jobs", rep)
	}
	left, err := ops.PurgeTenant(ctx, fleet, ops.PurgeOptions{Tenant: "acme", DryRun: true})
	must(t, err, "dry run")
	if left.Moved != 30 || left.Pending != 2 {
		t.Errorf("acme's jobs left: %+v, want the 30 younger moved and 2 pending", left)
	}
	g, err := ops.PurgeTenant(ctx, fleet, ops.PurgeOptions{Tenant: "globex", DryRun: true})
	must(t, err, "dry run")
	if g.Moved != 9 {
		t.Errorf("globex's jobs left: %+v, want its 9 moved", g)
	}
	all, err := ops.PurgeTenant(ctx, fleet, ops.PurgeOptions{Tenant: "acme"})
	must(t, err, "purge")
	if all.Moved != 30 || all.Pending != 2 {
		t.Errorf("purge of the rest: %+v, want 30 moved and 2 pending", all)
	}
}

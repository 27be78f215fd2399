package integration

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/pause"
	"github.com/throttler/throttler/top"
)

// starts records when each job's handler started.
type starts struct {
	mu   sync.Mutex
	at   map[string][]time.Time // by tenant
	runs map[string]int         // by job id
}

func (s *starts) handler(_ context.Context, job consumer.Job) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.at[job.Tenant] = append(s.at[job.Tenant], time.Now())
	s.runs[job.ID]++
	return nil
}

func (s *starts) count(tenant string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.at[tenant])
}

func (s *starts) last(tenant string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.at[tenant]
	if len(ts) == 0 {
		return time.Time{}
	}
	return ts[len(ts)-1]
}

// TestPauseAcrossWorkers: with two workers, a tenant paused while its
// jobs run starts none later than a second after the pause; its jobs
// published while paused wait (throttler top shows them paused, held by
// the pause) while another tenant's run; on resume every one of its jobs
// runs, each once, none lost.
func TestPauseAcrossWorkers(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "20/s", "THROTTLER_PAUSE_RECHECK": "1m"})
	s := &starts{at: map[string][]time.Time{}, runs: map[string]int{}}
	w1 := e.startWorker(cfg, s.handler)
	w2 := e.startWorker(cfg, s.handler)
	e.waitBuilt(w1)
	e.waitBuilt(w2)
	opts := pause.Options{JetStream: e.js, Bucket: cfg.PauseBucket, Stream: cfg.Stream, Schedules: cfg.Schedules}
	ctx := context.Background()

	ids := e.publishJobs(cfg.Stream, "jobs.acme", nil, 40) // 2 s of acme's rate
	testenv.Eventually(t, 10*time.Second, "acme's first jobs running", func() bool { return s.count("acme") >= 5 })
	p, err := pause.Put(ctx, opts, pause.Request{Tenant: "acme", Reason: "incident 7"})
	if err != nil {
		t.Fatal(err)
	}
	pausedAt := time.Now()
	for id := range e.publishJobs(cfg.Stream, "jobs.acme", nil, 20) {
		ids[id] = true
	}
	e.publishJobs(cfg.Stream, "jobs.globex", nil, 10)
	testenv.Eventually(t, 10*time.Second, "globex's jobs run while acme is paused", func() bool { return s.count("globex") == 10 })

	// Every acme job not run waits paused, as top shows.
	var row top.Row
	testenv.Eventually(t, 10*time.Second, "top showing acme's jobs paused", func() bool {
		v, err := top.Gather(ctx, e.nc, top.Options{Subject: app.TopSubject(cfg), N: 10})
		if err != nil || v.Workers != 2 {
			return false
		}
		for _, r := range v.Rows {
			if r.Tenant == "acme" {
				row = r
				return int(r.Paused)+s.count("acme") == len(ids)
			}
		}
		return false
	})
	if !strings.HasPrefix(row.Binding, header.WaitPaused) || !strings.Contains(row.Binding, "incident 7") {
		t.Errorf("top says acme is held by %q, want the pause and its reason", row.Binding)
	}
	if last := s.last("acme"); last.After(pausedAt.Add(time.Second)) {
		t.Fatalf("an acme job started %s after the pause (revision %d), want none after 1s", last.Sub(pausedAt), p.Revision)
	}
	ranBefore := s.count("acme")
	t.Logf("acme: %d jobs ran before the pause took, %d paused (top)", ranBefore, row.Paused)

	resumedAt := time.Now()
	res, err := pause.Resume(ctx, opts, "acme")
	if err != nil || res.Was == nil || res.Released != len(ids)-ranBefore {
		t.Fatalf("Resume = %+v, %v; want the pause lifted and its %d parked jobs released", res, err, len(ids)-ranBefore)
	}
	testenv.Eventually(t, 20*time.Second, "every acme job run after the resume", func() bool { return s.count("acme") == len(ids) })
	t.Logf("resume released %d copies; the last acme job ran %s after it", res.Released, s.last("acme").Sub(resumedAt))
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range ids {
		if s.runs[id] != 1 {
			t.Errorf("job %s ran %d times, want once", id, s.runs[id])
		}
	}
}

// topRow returns tenant's row of the fleet's top view, and how many
// workers answered.
func topRow(ctx context.Context, e *env, cfg *app.Settings, tenant string) (top.Row, int) {
	v, err := top.Gather(ctx, e.nc, top.Options{Subject: app.TopSubject(cfg), N: -1})
	if err != nil {
		return top.Row{}, 0
	}
	for _, r := range v.Rows {
		if r.Tenant == tenant {
			return r, v.Workers
		}
	}
	return top.Row{}, v.Workers
}

// TestPauseSurvivesWorkerRestarts: every worker stopped and new ones
// started, a paused tenant stays paused: the jobs the old workers parked
// come back at the recheck and are parked again by the new ones, its new
// jobs are parked too, and none runs until the resume, after which every
// one runs once.
func TestPauseSurvivesWorkerRestarts(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "50/s", "THROTTLER_PAUSE_RECHECK": "2s"})
	opts := pause.Options{JetStream: e.js, Bucket: cfg.PauseBucket, Stream: cfg.Stream, Schedules: cfg.Schedules}
	ctx := context.Background()
	s := &starts{at: map[string][]time.Time{}, runs: map[string]int{}}
	old := []*worker{e.startWorker(cfg, s.handler), e.startWorker(cfg, s.handler)}
	for _, w := range old {
		e.waitBuilt(w)
	}
	if _, err := pause.Put(ctx, opts, pause.Request{Tenant: "acme", Reason: "migration"}); err != nil {
		t.Fatal(err)
	}
	ids := e.publishJobs(cfg.Stream, "jobs.acme", nil, 20)
	e.publishJobs(cfg.Stream, "jobs.globex", nil, 5)
	testenv.Eventually(t, 10*time.Second, "globex's jobs run, acme's 20 parked", func() bool {
		r, _ := topRow(ctx, e, cfg, "acme")
		return s.count("globex") == 5 && r.Paused == 20
	})
	for _, w := range old {
		w.stop(t)
	}

	fresh := []*worker{e.startWorker(cfg, s.handler), e.startWorker(cfg, s.handler)}
	for _, w := range fresh {
		e.waitBuilt(w)
	}
	for id := range e.publishJobs(cfg.Stream, "jobs.acme", nil, 10) {
		ids[id] = true
	}
	e.publishJobs(cfg.Stream, "jobs.globex", nil, 5)
	// The old workers' parked jobs come back after 2 s, and the new
	// workers park them again: all 30 are theirs to count.
	testenv.Eventually(t, 15*time.Second, "the new workers holding all 30 of acme's jobs paused", func() bool {
		r, workers := topRow(ctx, e, cfg, "acme")
		return workers == 2 && r.Paused == 30 && s.count("globex") == 10
	})
	if n := s.count("acme"); n != 0 {
		t.Fatalf("%d acme jobs ran while acme was paused across a restart", n)
	}
	res, err := pause.Resume(ctx, opts, "acme")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 15*time.Second, "every acme job run after the resume", func() bool { return s.count("acme") == len(ids) })
	if res.Released == 0 {
		t.Error("the resume released no parked copy: they waited for their recheck")
	}
	t.Logf("resume released %d of %d", res.Released, len(ids))
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range ids {
		if s.runs[id] != 1 {
			t.Errorf("job %s ran %d times, want once", id, s.runs[id])
		}
	}
}

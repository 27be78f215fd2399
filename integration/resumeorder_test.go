package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/pause"
)

// startOrder records the stream sequence of every job a handler starts,
// in the order they start.
type startOrder struct {
	mu   sync.Mutex
	seqs []uint64
	at   []time.Time
}

func (o *startOrder) handler(_ context.Context, job consumer.Job) error {
	seq, err := strconv.ParseUint(job.ID[strings.LastIndexByte(job.ID, ':')+1:], 10, 64)
	if err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seqs = append(o.seqs, seq)
	o.at = append(o.at, time.Now())
	return nil
}

func (o *startOrder) started() []uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]uint64(nil), o.seqs...)
}

// TestResumeRunsPausedJobsInOrderBeforeNewOnes: a tenant's jobs paused
// at different moments (some waiting for their slot when the pause came,
// parked when they came back, among jobs published during the pause) run
// on resume in the order they were published, and every one of them
// before the jobs published while the resume runs (within the slack of a
// loaded machine's timers). Before, the copies
// were brought back in the order they were parked, after the pause was
// deleted, so that jobs published in between ran first.
func TestResumeRunsPausedJobsInOrderBeforeNewOnes(t *testing.T) {
	e := setup(t)
	// 20/s without a burst: every job its own slot, 50 ms apart, so that
	// one worker starts them in the order they were decided.
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "20/s:1", "THROTTLER_PAUSE_RECHECK": "1m"})
	opts := pause.Options{JetStream: e.js, Bucket: cfg.PauseBucket, Stream: cfg.Stream, Schedules: cfg.Schedules}
	ctx := context.Background()
	o := &startOrder{}
	w := e.startWorker(cfg, o.handler)
	e.waitBuilt(w)

	// Jobs given slots over the next second, then the pause: those not
	// yet run are parked when they come back, after the ones below.
	e.publishJobs(cfg.Stream, "jobs.acme", nil, 20)
	if _, err := pause.Put(ctx, opts, pause.Request{Tenant: "acme", Reason: "order"}); err != nil {
		t.Fatal(err)
	}
	ranBefore := len(o.started())
	e.publishJobs(cfg.Stream, "jobs.acme", nil, 20)
	testenv.Eventually(t, 15*time.Second, "acme's jobs all parked or run", func() bool {
		r, _ := topRow(ctx, e, cfg, "acme")
		return int(r.Paused)+len(o.started()) == 40
	})
	paused := 40 - len(o.started())
	if paused < 25 {
		t.Fatalf("only %d of acme's jobs paused (%d ran before the pause took, %d at the pause), want the test's order to be tried on at least 25", paused, len(o.started()), ranBefore)
	}

	// Jobs published while the resume runs.
	var late []uint64
	var lateErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 10 {
			ack, err := e.js.PublishMsg(ctx, &nats.Msg{Subject: "jobs.acme", Data: []byte("late")})
			if err != nil {
				lateErr = err
				return
			}
			late = append(late, ack.Sequence)
			time.Sleep(100 * time.Millisecond) // spread over the resume's passes
		}
	}()
	resumedAfter := len(o.started())
	res, err := pause.Resume(ctx, opts, "acme")
	if err != nil {
		t.Fatal(err)
	}
	<-done
	if lateErr != nil {
		t.Fatal(lateErr)
	}
	testenv.Eventually(t, 20*time.Second, "every acme job run", func() bool { return len(o.started()) == 50 })

	got := o.started()
	o.mu.Lock()
	at := append([]time.Time(nil), o.at...)
	o.mu.Unlock()
	// A job whose slot passed while the worker was held up (a loaded
	// machine's timers, a moved copy fired late) starts late, after jobs
	// of later slots: an order kept within resumeSlack of the start
	// times. Brought back in the order they were parked, or after the
	// jobs published during the resume, the jobs would start a second or
	// more out of order (20 jobs of 50 ms slots).
	const resumeSlack = 250 * time.Millisecond
	firstLate := late[0]
	for i := resumedAfter; i < len(got); i++ {
		for j := i + 1; j < len(got); j++ {
			if got[j] >= got[i] || got[j] >= firstLate || at[j].Sub(at[i]) <= resumeSlack {
				continue
			}
			var offs []string
			for k := resumedAfter; k < len(got); k++ {
				offs = append(offs, fmt.Sprintf("%d@%dms", got[k], at[k].Sub(at[resumedAfter]).Milliseconds()))
			}
			what := "a job published after it"
			if got[i] >= firstLate {
				what = "a job published during the resume"
			}
			t.Fatalf("job %d (published before the resume) started %s after %s, job %d; starts %v (resume released %d); %v",
				got[j], at[j].Sub(at[i]), what, got[i], got, res.Released, offs)
		}
	}
	t.Logf("resume released %d (the late jobs parked during it included); starts %v, from %d on after the resume", res.Released, got, resumedAfter)
}

// TestPauseEndingByItselfRunsJobsInOrder: a pause with an end (--for)
// is ended at its end by a worker, which brings its jobs back in the
// order they were published, rather than as each copy fires; none of
// them starts before the end.
func TestPauseEndingByItselfRunsJobsInOrder(t *testing.T) {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "20/s:1", "THROTTLER_PAUSE_RECHECK": "1m"})
	opts := pause.Options{JetStream: e.js, Bucket: cfg.PauseBucket, Stream: cfg.Stream, Schedules: cfg.Schedules}
	ctx := context.Background()
	o := &startOrder{}
	w := e.startWorker(cfg, o.handler)
	e.waitBuilt(w)

	e.publishJobs(cfg.Stream, "jobs.acme", nil, 20)
	p, err := pause.Put(ctx, opts, pause.Request{Tenant: "acme", Reason: "order", For: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e.publishJobs(cfg.Stream, "jobs.acme", nil, 20)
	testenv.Eventually(t, 4*time.Second, "acme's jobs all parked or run", func() bool {
		r, _ := topRow(ctx, e, cfg, "acme")
		return int(r.Paused)+len(o.started()) == 40
	})
	before := len(o.started())
	if 40-before < 25 {
		t.Fatalf("only %d of acme's jobs paused, want the order tried on at least 25", 40-before)
	}
	testenv.Eventually(t, 20*time.Second, "every acme job run after the pause's end", func() bool { return len(o.started()) == 40 })

	got := o.started()
	o.mu.Lock()
	at := append([]time.Time(nil), o.at...)
	o.mu.Unlock()
	for i := before; i < len(got); i++ {
		if at[i].Before(p.Until) {
			t.Fatalf("job %d started %s before the pause's end", got[i], p.Until.Sub(at[i]))
		}
		if i > before && got[i-1] > got[i] {
			t.Fatalf("job %d started after job %d; starts %v, from %d on after the end", got[i], got[i-1], got, before)
		}
	}
	// Ended by a worker, not by the copies firing 2 s later (the worker's
	// grace after a pause's end, consumer's pauseEndGrace).
	if first := at[before]; first.Sub(p.Until) >= 2*time.Second {
		t.Errorf("the first job after the end started %s after it: the copies came back by themselves", first.Sub(p.Until))
	}
	t.Logf("starts %v, from %d on after the end; the first %s after it", got, before, at[before].Sub(p.Until))
}

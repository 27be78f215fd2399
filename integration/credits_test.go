package integration

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/credits"
	"github.com/throttler/throttler/header"
	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

// spendLog records the jobs handlers ran: their stream sequence, cost and
// start time.
type spendLog struct {
	mu    sync.Mutex
	seqs  []uint64
	cost  int64
	at    []time.Time
	costs map[uint64]int64
}

func (s *spendLog) handler(_ context.Context, job consumer.Job) error {
	seq, err := strconv.ParseUint(job.ID[strings.LastIndexByte(job.ID, ':')+1:], 10, 64)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, again := s.costs[seq]; again {
		return nil // run twice: counted once, and caught by ran
	}
	s.costs[seq] = job.Cost
	s.seqs = append(s.seqs, seq)
	s.at = append(s.at, time.Now())
	s.cost += job.Cost
	return nil
}

// spent returns the cost run so far and how many jobs ran.
func (s *spendLog) spent() (int64, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cost, len(s.seqs)
}

// creditsRun is a tenant under "credits" alone, two workers, jobs of cost
// 1 to 5 in turn: what the balance admitted, at each step.
type creditsRun struct {
	e    *env
	cfg  *app.Settings
	opts credits.Options
	log  *spendLog
	seqs []uint64 // the jobs published, in order
	cost []int64  // their costs
}

func startCreditsRun(t *testing.T, workers int) *creditsRun {
	e := setup(t)
	cfg := e.config(map[string]string{"THROTTLER_DEFAULT_LIMIT": "credits", "THROTTLER_DEFER": "auto"})
	lim, err := throttle.New(e.redisClient(cfg), throttle.Options{Policies: cfg.Rules, Prefix: cfg.KeyPrefix})
	if err != nil {
		t.Fatal(err)
	}
	r := &creditsRun{e: e, cfg: cfg, log: &spendLog{costs: map[uint64]int64{}},
		opts: credits.Options{Balances: lim, JetStream: e.js, Records: cfg.CreditsStream, Stream: cfg.Stream, Schedules: cfg.Schedules,
			CostHeader: cfg.CostHeader}}
	for range workers {
		e.waitBuilt(e.startWorker(cfg, r.log.handler))
	}
	return r
}

// publish publishes n jobs of acme of cost 1, 2, 3, 4, 5, 1, ...
func (r *creditsRun) publish(n int) {
	for range n {
		c := int64(len(r.seqs)%5 + 1)
		seq := r.e.publish("jobs.acme", nats.Header{"Job-Cost": []string{strconv.FormatInt(c, 10)}}, []byte("x"))
		r.seqs = append(r.seqs, seq)
		r.cost = append(r.cost, c)
	}
}

// costOf is the cost of the job published as seq.
func (r *creditsRun) costOf(seq uint64) int64 {
	for i, s := range r.seqs {
		if s == seq {
			return r.cost[i]
		}
	}
	return 0
}

// waitQuiet waits until every job published either ran or waits parked
// for credits (a copy of it is stored; a copy left behind by a release
// whose delete failed fires later as a duplicate), then checks what
// credits allow: the cost run is at most credit; every job before the
// first one waiting ran, and what is left of credit cannot cover that one
// (with several workers, a job after it may have been decided first,
// batch by batch). It returns the first waiting job (0: none) and the
// credit left.
func (r *creditsRun) waitQuiet(t *testing.T, credit int64, within time.Duration) (uint64, int64) {
	t.Helper()
	testenv.Eventually(t, within, "every job run or parked for credits", func() bool {
		got, _ := r.log.spent()
		if got > credit {
			t.Fatalf("%d cost ran on %d credits", got, credit)
		}
		parked := r.parked(t)
		r.log.mu.Lock()
		defer r.log.mu.Unlock()
		for _, seq := range r.seqs {
			if _, ran := r.log.costs[seq]; !ran && !parked[seq] {
				return false
			}
		}
		return true
	})
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	var head uint64
	for _, seq := range r.seqs {
		if _, ok := r.log.costs[seq]; !ok {
			head = seq
			break
		}
	}
	left := credit - r.log.cost
	if head != 0 && r.costOf(head) <= left {
		t.Fatalf("job %d waits, of cost %d, with %d credits left; ran %v", head, r.costOf(head), left, r.log.seqs)
	}
	return head, left
}

// parked is the jobs of acme whose copy waits in the stream parked for
// credits, what a top-up brings back. A copy deferred for a short while
// (behind the jobs a top-up brought back, say) is not counted: its job
// comes back, and only then is parked for credits, perhaps after the
// top-up read the parked ones.
func (r *creditsRun) parked(t *testing.T) map[uint64]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	prefix := r.cfg.Schedules.Copy("acme", 0)
	prefix = prefix[:strings.LastIndexByte(prefix, '.')+1]
	cons, err := r.e.js.OrderedConsumer(ctx, r.cfg.Stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{prefix + "*"}})
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]bool{}
	left := int(cons.CachedInfo().NumPending)
	for left > 0 {
		batch, err := cons.Fetch(left, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			if !strings.HasPrefix(m.Headers().Get(header.WaitReason), header.WaitCredits) {
				continue
			}
			if seq, err := strconv.ParseUint(strings.TrimPrefix(m.Subject(), prefix), 10, 64); err == nil {
				out[seq] = true
			}
		}
		if got == 0 {
			break // fired meanwhile: the next look sees
		}
		left -= got
	}
	return out
}

// covered is the parked jobs, from head on in order, that budget covers.
func (r *creditsRun) covered(head uint64, budget int64) []uint64 {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	var out []uint64
	for i, seq := range r.seqs {
		if _, ran := r.log.costs[seq]; ran || seq < head {
			continue
		}
		if r.cost[i] > budget {
			break
		}
		budget -= r.cost[i]
		out = append(out, seq)
	}
	return out
}

// waitRan waits until every job of seqs ran.
func (r *creditsRun) waitRan(t *testing.T, seqs []uint64, within time.Duration) time.Time {
	t.Helper()
	var last time.Time
	testenv.Eventually(t, within, "the jobs the top-up covers run", func() bool {
		r.log.mu.Lock()
		defer r.log.mu.Unlock()
		for _, seq := range seqs {
			if _, ok := r.log.costs[seq]; !ok {
				return false
			}
		}
		last = r.log.at[len(r.log.at)-1]
		return true
	})
	return last
}

// TestCreditsAdmitExactlyTheBalanceAndATopUpReleasesInOrder: balance
// 1,000, jobs of cost 1 to 5 on two workers: at most 1,000 of cost runs,
// every job before the first waiting one runs and what is left cannot
// cover that one; the rest wait parked. credits add 500 brings back
// exactly the waiting jobs it covers, in order, which run, and no more.
func TestCreditsAdmitExactlyTheBalanceAndATopUpReleasesInOrder(t *testing.T) {
	r := startCreditsRun(t, 2)
	ctx := context.Background()
	if _, err := credits.Set(ctx, r.opts, "acme", 1000); err != nil {
		t.Fatal(err)
	}
	r.publish(600) // 1,800 of cost
	head, left := r.waitQuiet(t, 1000, 30*time.Second)
	want := r.covered(head, left+500)

	began := time.Now()
	ch, err := credits.Add(ctx, r.opts, "acme", 500)
	if err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	if ch.Balance != left+500 || ch.Released != len(want) {
		t.Fatalf("add 500 = %+v; want balance %d, %d jobs brought back", ch, left+500, len(want))
	}
	last := r.waitRan(t, want, 20*time.Second)
	_, left2 := r.waitQuiet(t, 1500, 20*time.Second)
	t.Logf("1,000 credits ran %d of cost; the top-up of 500 took %s; the %d jobs it covered all started %s after it began (%s after its return); %d left",
		1000-left, back.Sub(began).Round(time.Millisecond), len(want), last.Sub(began).Round(time.Millisecond), last.Sub(back).Round(time.Millisecond), left2)

	h, err := credits.History(ctx, r.e.js, r.cfg.CreditsStream, "acme")
	if err != nil || len(h) != 2 || h[0].Op != "set" || h[1].Op != "add" || h[1].Balance != left+500 {
		t.Fatalf("history = %+v, %v; want set 1000 then add 500", h, err)
	}
}

// TestCreditsJobsRightAfterASetDrawInOrder: with one worker, jobs
// published at once after a `credits set` that brought nothing back draw
// on the balance in their order: the first ten (30 of cost) run, the
// eleventh heads the line, and every later one waits behind it. (The
// set's gate used to hold them a second, and jobs that came after it
// closed drew first.)
func TestCreditsJobsRightAfterASetDrawInOrder(t *testing.T) {
	r := startCreditsRun(t, 1)
	ctx := context.Background()
	ch, err := credits.Set(ctx, r.opts, "acme", 30)
	if err != nil || ch.Released != 0 {
		t.Fatalf("set 30 = %+v, %v; want nothing brought back", ch, err)
	}
	r.publish(30) // costs 1 to 5, twice, cover 30
	head, left := r.waitQuiet(t, 30, 30*time.Second)
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	for i, seq := range r.seqs {
		if _, ran := r.log.costs[seq]; ran != (i < 10) {
			t.Errorf("job %d of 30 (seq %d): ran %v, want only the first 10 run", i+1, seq, ran)
		}
	}
	if head != r.seqs[10] || left != 0 {
		t.Errorf("head of the line seq %d with %d left, want the 11th job (seq %d) and 0", head, left, r.seqs[10])
	}
}

// TestCreditsRedisRestartedEmptySpendsNoCreditTwice: Redis restarted
// empty mid-run forgets the balance; the jobs wait (nothing is admitted
// against a balance Redis lost), the history keeps every change, and a
// later top-up runs what it covers: the cost run never exceeds the
// credits ever added.
func TestCreditsRedisRestartedEmptySpendsNoCreditTwice(t *testing.T) {
	r := startCreditsRun(t, 2)
	ctx := context.Background()
	if _, err := credits.Set(ctx, r.opts, "acme", 300); err != nil {
		t.Fatal(err)
	}
	r.publish(50) // 150 of cost
	if head, _ := r.waitQuiet(t, 300, 30*time.Second); head != 0 {
		t.Fatalf("job %d waits with 150 of 300 credits spent", head)
	}

	r.e.redis.Restart(t)
	r.publish(50) // 150 more: the balance is gone
	head, left := r.waitQuiet(t, 150, 30*time.Second)
	if head != r.seqs[50] || left != 0 {
		t.Fatalf("after Redis lost the balance, job %d waits first with %d left; want job %d, nothing run", head, left, r.seqs[50])
	}
	st, err := credits.Get(ctx, r.opts, "acme")
	if err != nil || st.Balance != 0 || !st.Lost || st.Last == nil || st.Last.Balance != 300 {
		t.Fatalf("get = %+v, %v; want balance 0, lost, last recorded 300", st, err)
	}
	want := r.covered(head, 100)
	if _, err := credits.Add(ctx, r.opts, "acme", 100); err != nil {
		t.Fatal(err)
	}
	r.waitRan(t, want, 20*time.Second)
	r.waitQuiet(t, 250, 20*time.Second) // 150 before, 100 now, of 400 ever added
	h, err := credits.History(ctx, r.e.js, r.cfg.CreditsStream, "acme")
	if err != nil || len(h) != 2 {
		t.Fatalf("history = %+v, %v; want both changes", h, err)
	}
}

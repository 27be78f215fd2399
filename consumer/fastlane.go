package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/subject"
	"github.com/throttler/throttler/throttle"
)

// HeaderFast marks a job's fast copy: a copy the fast lane made to take the
// job out of a backlog (see FastLane). Its value says how the lane decided
// the job: "admitted" (it runs on its first delivery without being decided
// again: it was charged then) or "reserved" (it holds a slot to wait for).
const HeaderFast = "Throttler-Fast"

// Values of HeaderFast.
const (
	fastAdmitted = "admitted"
	fastReserved = "reserved"
)

// fastBase starts the incarnations of fast copies (see fastIncarnation):
// stream sequences, the incarnations of every other message, stay below it.
const fastBase = 1 << 52

// fastIncarnation is the incarnation of the fast copy of the job first
// stored at stream sequence seq. It is fixed by the original, not by the
// copy's own sequence, so the fast lane can claim the job for the copy
// before the copy exists.
func fastIncarnation(seq uint64) int64 { return int64(fastBase + seq%fastBase) }

// isFastClaim reports whether an owner record names a fast copy.
func isFastClaim(owner int64) bool { return owner >= fastBase }

// OwnerClaimer claims and gives up jobs' owner records;
// *throttle.Copies satisfies it.
type OwnerClaimer interface {
	Claim(ctx context.Context, tenant, jobID string, incarnation int64) (claimed bool, owner int64, err error)
	Release(ctx context.Context, tenant, jobID string, incarnation int64) (bool, error)
}

// FastLane lets the jobs of a tenant with nothing else queued pass a
// backlog of other tenants' jobs. A consumer delivers in stream order, so
// without it a job stored behind another tenant's flood waits until the
// worker has taken in (and deferred) every job of the flood ahead of it.
//
// While the jobs consumer has a backlog, the jobs stream republishes the
// headers of every message it stores (RePublish, headers only) on
// Arrivals; the lane switches that on and off (Republish). When a job
// arrives while the jobs
// consumer has at least Backlog jobs left to deliver, and its tenant has
// no job queued in that backlog (only jobs the lane took, at most
// TenantShare), the lane takes it: it decides the job at once, which
// charges the tenant and records the job's owner as its fast copy; checks
// that the jobs consumer has not delivered the original yet; copies the
// original to a subject of its own, which a consumer of its own delivers
// at once; and deletes the original from the stream. The copy is then
// handled like any job: it runs in the slot it was decided for.
//
// The owner record keeps a job from running twice however the lane is
// interrupted: an original delivered after the claim is a Duplicate, acked
// once its copy is stored and handed back until then; a claim whose copy
// was never made expires (see throttle.Copies.Claim) and the
// original then runs.
type FastLane struct {
	// Arrivals is the subject the jobs stream republishes stored messages'
	// headers on, a wildcard such as "_throttler.arrived.JOBS.>". Required.
	Arrivals string
	// Queue is the queue group the fleet's workers share arrivals in.
	// Required.
	Queue string
	// Stream is the jobs stream, which originals are read from and deleted
	// from. Required.
	Stream jetstream.Stream
	// Consumer delivers the fast copies. Required.
	Consumer jetstream.Consumer
	// Subjects names the fast copies' subjects (Schedules.Fast), bound by
	// the jobs stream, filtered by Consumer and by no other consumer.
	// Required.
	Subjects subject.Schedules
	// Owners claims jobs for their fast copies. Required.
	Owners OwnerClaimer
	// JobSubjects are the subjects of the jobs consumer. Required.
	JobSubjects []string
	// Backlog is the fewest jobs the jobs consumer must have left to
	// deliver for the lane to take a job. Defaults to 4×FetchBatch.
	Backlog int
	// TenantShare caps one tenant's jobs the lane has taken whose
	// originals the jobs consumer has not reached yet. Defaults to 16.
	TenantShare int
	// Republish turns the jobs stream's republishing of arrivals on or
	// off (see SetArrivals): on when the jobs consumer has a backlog, off
	// once it has had none for IdleOff, so the server spends nothing on
	// arrivals while every job is delivered at once. Nil leaves arrivals
	// as they are (on, for the lane to work).
	Republish func(ctx context.Context, on bool) error
	// ArrivalsOn says whether the stream republishes arrivals at start.
	ArrivalsOn bool
	// IdleOff is how long the jobs consumer must have had no backlog for
	// the lane to turn arrivals off. Defaults to 1 minute.
	IdleOff time.Duration
	// MoveRate caps the jobs per second the worker defers out of the jobs
	// consumer while arrivals come in (see lane.pause): a flood that is
	// being put off then takes at most that share of the machine, and the
	// jobs taking the lane are not queued behind it for the CPU.
	// Defaults to DefaultMoveRate; negative means no cap.
	MoveRate int
}

// DefaultMoveRate is FastLane.MoveRate's default: 8,000 deferrals a second
// for each worker. A 20,000-job flood is then put off in about 1.25 s by
// two workers instead of about 0.5 s flat out (BENCHMARKS.md, "Noisy
// neighbour"), leaving the lane's jobs cores that flat out it keeps busy.
const DefaultMoveRate = 8000

// lane is a worker's running fast lane.
type lane struct {
	FastLane
	w    *Worker
	work chan arrival

	wake chan struct{} // asks run to turn arrivals on

	mu       sync.Mutex
	pos      uint64              // highest stream sequence the jobs consumer delivered here
	pending  uint64              // jobs it had left to deliver then
	slow     map[string]uint64   // tenant → its latest job left to the jobs consumer
	taken    map[string][]uint64 // tenant → jobs taken whose originals lie past pos
	pruned   time.Time
	on       bool      // the stream republishes arrivals
	lowSince time.Time // since when the backlog has been under Backlog; zero while over it
	failedAt time.Time // when turning arrivals on or off last failed

	arrived  atomic.Int64 // when the last arrival of a job came, Unix ns
	paceNext time.Time    // when the deciding loop may go on; only that loop uses it
}

// arrival is a job the lane takes.
type arrival struct {
	id, tenant, subject string
	seq                 uint64
	cost                int64
	at                  time.Time // when it arrived
	admitted            bool      // the claim admitted it (else it holds a slot)
}

// laneBatch caps the jobs the lane takes in one round of calls.
const laneBatch = 64

// newLane returns w's fast lane as cfg describes it, or an error naming
// what cfg is missing.
func newLane(cfg FastLane, w *Worker) (*lane, error) {
	var missing []error
	if cfg.Arrivals == "" || cfg.Queue == "" {
		missing = append(missing, errors.New("Arrivals and Queue"))
	}
	if cfg.Stream == nil || cfg.Consumer == nil {
		missing = append(missing, errors.New("Stream and Consumer"))
	}
	if cfg.Subjects == "" || cfg.Owners == nil || len(cfg.JobSubjects) == 0 {
		missing = append(missing, errors.New("Subject, Owners and JobSubjects"))
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("consumer: fast lane: missing %w", errors.Join(missing...))
	}
	setDefault(&cfg.Backlog, 4*w.cfg.FetchBatch)
	setDefault(&cfg.TenantShare, 16)
	setDefault(&cfg.IdleOff, time.Minute)
	setDefault(&cfg.MoveRate, DefaultMoveRate)
	return &lane{FastLane: cfg, w: w, work: make(chan arrival, 1024), wake: make(chan struct{}, 1),
		slow: map[string]uint64{}, taken: map[string][]uint64{}, on: cfg.ArrivalsOn, lowSince: time.Now()}, nil
}

// observe records the jobs consumer's position: a delivered message's
// stream sequence and the jobs it had left to deliver after it.
func (l *lane) observe(seq, pending uint64) {
	l.mu.Lock()
	if seq > l.pos {
		l.pos, l.pending = seq, pending
	}
	backlog := l.pending >= uint64(l.Backlog)
	switch {
	case backlog:
		l.lowSince = time.Time{}
	case l.lowSince.IsZero():
		l.lowSince = time.Now()
	}
	turnOn := backlog && !l.on && l.Republish != nil
	l.mu.Unlock()
	if turnOn {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// switchArrivals turns the stream's arrivals on when the jobs consumer has
// a backlog, and off when it has had none for IdleOff. A failed switch is
// tried again 10 s later at the earliest.
func (l *lane) switchArrivals(ctx context.Context) {
	if l.Republish == nil {
		return
	}
	l.mu.Lock()
	want := l.on
	switch {
	case time.Since(l.failedAt) < 10*time.Second:
	case !l.on && l.pending >= uint64(l.Backlog):
		want = true
	case l.on && !l.lowSince.IsZero() && time.Since(l.lowSince) >= l.IdleOff:
		want = false
	}
	on := l.on
	l.mu.Unlock()
	if want == on {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := l.Republish(sctx, want)
	cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.failedAt = time.Now()
		l.w.log.Warn("fast lane: switching the stream's arrivals failed", "on", want, "err", err)
		return
	}
	l.on = want
	if want {
		l.w.log.Info("fast lane: the jobs consumer has a backlog; the stream republishes arrivals", "backlog", l.pending)
	} else {
		l.w.log.Info("fast lane: no backlog for a while; the stream stops republishing arrivals", "for", l.IdleOff)
	}
}

// arrive looks at one republished message and hands the job to the run
// loop if the lane takes it. It runs on the subscription's goroutine, so it only reads
// headers.
func (l *lane) arrive(m *nats.Msg) {
	h := m.Header
	seq, err := strconv.ParseUint(h.Get(jetstream.SequenceHeader), 10, 64)
	subject := h.Get(jetstream.SubjectHeader)
	if err != nil || subject == "" || h.Get(HeaderJobID) != "" {
		return // not a stored message, or a moved job's copy
	}
	if !l.isJob(subject) {
		return
	}
	l.arrived.Store(time.Now().UnixNano())
	tenant, err := l.w.cfg.Tenant.Of(subject, h)
	if err != nil {
		return // the jobs consumer dead-letters it
	}
	cost, err := parseCost(h, l.w.cfg.CostHeader)
	if err != nil {
		return
	}
	if !l.admit(tenant, seq) {
		return
	}
	a := arrival{id: h.Get(jetstream.StreamHeader) + ":" + strconv.FormatUint(seq, 10), tenant: tenant, subject: subject, seq: seq, cost: cost, at: time.Now()}
	select {
	case l.work <- a:
	default:
		l.leave(tenant, seq)
	}
}

// paceWindow is how recent an arrival must be for the lane to count as in
// use, and pace to cap the deferrals.
const paceWindow = time.Second

// pause is how long the deciding loop waits, at now, after a group of the
// jobs consumer in which deferred jobs were put off, so that they are put
// off at no more than MoveRate a second while arrivals come in: while the
// consumer has a backlog, the jobs taking the lane need the CPU that
// moving a flood would take (on two cores, behind a flood moved flat out,
// a lane job waited up to 10 ms at one of its steps). A group mostly
// admitted is never paused, nor is one once no arrival has come for
// paceWindow: no job is taking the lane then. Only the deciding loop
// calls it.
func (l *lane) pause(now time.Time, deferred, decided int) time.Duration {
	if l.MoveRate < 0 || deferred*2 <= decided || now.Sub(time.Unix(0, l.arrived.Load())) > paceWindow {
		l.paceNext = time.Time{}
		return 0
	}
	// The time spent deciding counts towards the pace, up to paceSlack:
	// a loop that was idle longer starts afresh.
	if now.Sub(l.paceNext) > paceSlack {
		l.paceNext = now
	}
	l.paceNext = l.paceNext.Add(time.Duration(deferred) * time.Second / time.Duration(l.MoveRate))
	return max(0, l.paceNext.Sub(now))
}

// paceSlack is how far behind its pace the deciding loop may be and still
// have the time it spent count towards it.
const paceSlack = 10 * time.Millisecond

// isJob reports whether subject is one the jobs consumer delivers.
func (l *lane) isJob(subj string) bool {
	for _, p := range l.JobSubjects {
		if subject.Covers(p, subj) {
			return true
		}
	}
	return false
}

// admit decides whether the lane takes the tenant's job stored at seq, and
// books it either way.
func (l *lane) admit(tenant string, seq uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if now.Sub(l.pruned) > time.Second {
		l.prune()
		l.pruned = now
	}
	if l.pos == 0 {
		// The jobs consumer has delivered nothing here yet: where the
		// job stands is unknown. It is left to the consumer, but its
		// tenant's later jobs are not held behind it, which could be a
		// whole backlog behind.
		return false
	}
	taken := l.taken[tenant]
	for len(taken) > 0 && taken[0] <= l.pos {
		taken = taken[1:]
	}
	take := seq > l.pos && l.pending >= uint64(l.Backlog) && l.slow[tenant] <= l.pos && len(taken) < l.TenantShare
	if take {
		l.taken[tenant] = append(taken, seq)
	} else {
		l.slow[tenant] = seq
		l.taken[tenant] = taken
	}
	return take
}

// leave gives a job the lane booked back to the jobs consumer.
func (l *lane) leave(tenant string, seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.slow[tenant] = max(l.slow[tenant], seq)
	taken := l.taken[tenant]
	for i, s := range taken {
		if s == seq {
			l.taken[tenant] = append(taken[:i:i], taken[i+1:]...)
			break
		}
	}
}

// prune forgets tenants with nothing left past the jobs consumer's
// position. Called with mu held.
func (l *lane) prune() {
	for t, s := range l.slow {
		if s <= l.pos {
			delete(l.slow, t)
		}
	}
	for t, taken := range l.taken {
		if len(taken) == 0 || taken[len(taken)-1] <= l.pos {
			delete(l.taken, t)
		}
	}
}

// run takes the jobs arrive hands it, a batch at a time, and switches the
// stream's arrivals on and off, until ctx is cancelled.
func (l *lane) run(ctx context.Context) {
	tick := time.NewTicker(min(5*time.Second, l.IdleOff/4))
	defer tick.Stop()
	for {
		var batch []arrival
		select {
		case a := <-l.work:
			batch = append(batch, a)
		case <-l.wake:
			l.switchArrivals(ctx)
			continue
		case <-tick.C:
			l.switchArrivals(ctx)
			continue
		case <-ctx.Done():
			return
		}
	more:
		for len(batch) < laneBatch {
			select {
			case a := <-l.work:
				batch = append(batch, a)
			default:
				break more
			}
		}
		l.take(ctx, batch)
	}
}

// take claims a batch of jobs for their fast copies, copies them and
// deletes the originals. A job it cannot take is left to the jobs
// consumer, its claim given up.
func (l *lane) take(ctx context.Context, batch []arrival) {
	w := l.w
	// A take is not cut short by shutdown, which waits for it: stopped
	// between its steps, it would leave claims to be taken over.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.laneDeadline())
	defer cancel()

	// A job that waited here longer than a take may last is left behind:
	// its copy would be stored too late for laneTakeover.
	fresh := batch[:0]
	for _, a := range batch {
		if time.Since(a.at) > w.laneDeadline() {
			l.leave(a.tenant, a.seq)
			continue
		}
		fresh = append(fresh, a)
	}
	batch = fresh
	if len(batch) == 0 {
		return
	}

	// Read the originals while the jobs are decided: a round trip saved.
	originals := make([]*jetstream.RawStreamMsg, len(batch)) // nil: left below
	seqs := make([]uint64, len(batch))
	for i, a := range batch {
		seqs[i] = a.seq
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		inParallel(len(seqs), func(i int) { originals[i], _ = l.Stream.GetMsg(cctx, seqs[i]) })
	}()
	defer func() { <-read }()

	claimed := l.claim(cctx, batch)
	if len(claimed) == 0 {
		return
	}
	// An original the jobs consumer has delivered may have been decided
	// before the claim, as a fresh job that records no owner: leave it.
	info, ierr := w.cons.Info(cctx)
	<-read
	var copies []arrival
	for _, i := range claimed {
		if ierr != nil || batch[i].seq <= info.Delivered.Stream || originals[i] == nil {
			l.release(cctx, batch[i])
			continue
		}
		copies = append(copies, batch[i])
		originals[len(copies)-1] = originals[i]
	}
	l.copyOut(cctx, copies, originals[:len(copies)])
}

// claim decides each job of batch as its fast copy, which charges it (or
// reserves its slot) and makes the copy its owner, and returns the indexes
// of the jobs claimed; the others are left to the jobs consumer.
func (l *lane) claim(ctx context.Context, batch []arrival) []int {
	reqs := make([]throttle.Copy, len(batch))
	for i, a := range batch {
		reqs[i] = throttle.Copy{Request: throttle.Request{Tenant: a.tenant, JobID: a.id, Cost: a.cost}, Incarnation: fastIncarnation(a.seq)}
	}
	results := l.w.decider.DecideBatch(ctx, reqs)
	var claimed []int
	for i, a := range batch {
		res := results[i]
		l.w.stats.add(a.tenant, func(s *TenantStats) { s.RedisCalls++ })
		switch {
		case res.Err != nil || res.Outcome == throttle.Duplicate:
			l.leave(a.tenant, a.seq)
		case res.Outcome == throttle.Admitted:
			batch[i].admitted = true
			claimed = append(claimed, i) // the decision recorded the copy as owner
		case res.Outcome == throttle.Reserved:
			// A slot is held for the job: the copy waits for it.
			ok, _, err := l.Owners.Claim(ctx, a.tenant, a.id, fastIncarnation(a.seq))
			if err != nil || !ok {
				l.leave(a.tenant, a.seq)
				continue
			}
			claimed = append(claimed, i)
		default:
			l.leave(a.tenant, a.seq) // past the horizon: nothing was charged
		}
	}
	return claimed
}

// copyOut publishes the fast copy of each claimed job from its original
// (originals[i] is jobs[i]'s), then deletes the originals whose copies are
// stored.
func (l *lane) copyOut(ctx context.Context, jobs []arrival, originals []*jetstream.RawStreamMsg) {
	w := l.w
	acks := make([]jetstream.PubAckFuture, len(jobs))
	for i, a := range jobs {
		raw := originals[i]
		decided := fastReserved
		if a.admitted {
			decided = fastAdmitted
		}
		msg := &nats.Msg{Subject: l.Subjects.Fast(a.tenant, a.seq), Data: raw.Data, Header: nats.Header{}}
		copyHeaders(msg.Header, raw.Header)
		msg.Header.Set(HeaderJobID, a.id)
		msg.Header.Set(HeaderSubject, raw.Subject)
		msg.Header.Set(HeaderPublished, raw.Time.UTC().Format(time.RFC3339Nano))
		msg.Header.Set(HeaderFast, decided)
		msg.Header.Set(jetstream.MsgIDHeader, "fast:"+a.id)
		f, err := w.js.PublishMsgAsync(msg)
		if err != nil {
			l.release(ctx, a)
			continue
		}
		acks[i] = f
	}
	var stored []arrival // their originals are deleted
	for i, a := range jobs {
		if acks[i] == nil {
			continue
		}
		var err error
		select {
		case <-acks[i].Ok():
		case err = <-acks[i].Err():
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err != nil && !l.storedAfterAll(ctx, a, err) {
			continue
		}
		w.stats.add(a.tenant, func(s *TenantStats) { s.FastLaned++ })
		stored = append(stored, a)
	}
	inParallel(len(stored), func(i int) {
		if err := l.Stream.DeleteMsg(ctx, stored[i].seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			// The original, when delivered, finds its copy and is acked.
			w.log.Debug("fast lane: deleting a copied original failed", "job", stored[i].id, "err", err)
		}
	})
}

// storedAfterAll settles the claim of a job whose copy's publish failed
// with err, and reports whether the copy is stored all the same (a lost
// ack). A refused publish stored nothing: the claim is given up. After a
// timeout the copy may still be stored, and giving the claim up then would
// let the original run too: it is kept, and the original runs once it is
// taken over, if the copy is not stored by then.
func (l *lane) storedAfterAll(ctx context.Context, a arrival, err error) bool {
	stored, serr := l.copyStored(ctx, a.tenant, a.seq)
	switch {
	case stored:
		return true
	case !timedOut(err) && serr == nil:
		l.release(ctx, a)
	default:
		l.w.log.Warn("fast lane: copying a job failed; unless the copy was stored, its original runs once the claim is taken over",
			"tenant", a.tenant, "job", a.id, "err", err)
	}
	return false
}

// laneRequests caps the NATS requests one take has under way at once.
const laneRequests = 8

// inParallel calls f(0) … f(n-1), up to laneRequests at once, and returns
// when all have returned.
func inParallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, laneRequests)
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(i)
		}()
	}
	wg.Wait()
}

// release gives up the claim of a job the lane could not copy and leaves
// the job to the jobs consumer.
func (l *lane) release(ctx context.Context, a arrival) {
	if _, err := l.Owners.Release(ctx, a.tenant, a.id, fastIncarnation(a.seq)); err != nil {
		l.w.log.Warn("fast lane: giving up a claim failed; the job runs once the claim expires", "tenant", a.tenant, "job", a.id, "err", err)
	}
	l.leave(a.tenant, a.seq)
}

// copyStored reports whether the fast copy of the tenant's job stored at
// seq is in the stream.
func (l *lane) copyStored(ctx context.Context, tenant string, seq uint64) (bool, error) {
	_, err := l.Stream.GetLastMsgForSubject(ctx, l.Subjects.Fast(tenant, seq))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return false, nil
	}
	return false, err
}

// timedOut reports whether err is a wait that ran out, after which the
// outcome of what was waited for is unknown.
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrAsyncPublishTimeout)
}

// fastRecheck is how long an original whose job the fast lane claimed
// waits before it is decided again, when its copy is not stored yet.
const fastRecheck = time.Second

// laneDeadline bounds one take of the fast lane: its Redis calls and its
// NATS requests.
func (w *Worker) laneDeadline() time.Duration { return w.cfg.RedisTimeout + 2*time.Second }

// laneTakeover is the age past which an original whose job the fast lane
// claimed, and whose copy is not stored, is taken back: the lane that
// claimed it has stopped (a take starts within laneDeadline of the job's
// arrival and ends within laneDeadline of its start), so the claim is given
// up and the original runs instead of waiting for the claim to expire. The
// margin covers clocks: the job's age is read from the time the server
// stored it.
func (w *Worker) laneTakeover() time.Duration { return 3*w.laneDeadline() + 5*time.Second }

// startLane subscribes to arrivals and starts taking jobs; stop
// unsubscribes.
func (w *Worker) startLane(ctx context.Context) (stop func(), err error) {
	sub, err := w.js.Conn().QueueSubscribe(w.lane.Arrivals, w.lane.Queue, w.lane.arrive)
	if err != nil {
		return nil, fmt.Errorf("subscribing to %s: %w", w.lane.Arrivals, err)
	}
	done := make(chan struct{})
	go func() { defer close(done); w.lane.run(ctx) }()
	return func() {
		if err := sub.Unsubscribe(); err != nil {
			w.log.Debug("fast lane: unsubscribing from arrivals", "err", err)
		}
		<-done
	}, nil
}

// settleFastClaimed settles an incarnation of a job the fast lane claimed
// for its copy: acked as a duplicate once the copy is stored, handed back
// for fastRecheck until then (the copy is being made). A job older than
// laneTakeover whose copy is not stored was claimed by a lane that stopped
// before copying it: the claim is given up and the job handed back to run.
func (w *Worker) settleFastClaimed(ctx context.Context, msg jetstream.Msg, job Job) {
	if w.lane == nil {
		w.settle(msg, func(m jetstream.Msg) error { return m.NakWithDelay(fastRecheck) })
		return
	}
	cctx, cancel := context.WithTimeout(ctx, w.laneDeadline())
	defer cancel()
	seq := job.OriginalSequence()
	stored, err := w.lane.copyStored(cctx, job.Tenant, seq)
	switch {
	case err != nil:
		w.log.Warn("fast lane: looking for a job's copy failed; handing the job back", "tenant", job.Tenant, "job", job.ID, "err", err)
	case stored:
		w.stats.add(job.Tenant, func(s *TenantStats) { s.Duplicates++ })
		w.settle(msg, func(m jetstream.Msg) error { return m.Ack() })
		return
	case time.Since(job.Published) > w.laneTakeover():
		released, rerr := w.lane.Owners.Release(cctx, job.Tenant, job.ID, fastIncarnation(seq))
		if rerr == nil {
			w.log.Warn("fast lane: a job claimed for a copy never made; running it", "tenant", job.Tenant, "job", job.ID, "released", released)
			w.settle(msg, func(m jetstream.Msg) error { return m.Nak() })
			return
		}
		w.log.Warn("fast lane: giving up a stale claim failed; handing the job back", "tenant", job.Tenant, "job", job.ID, "err", rerr)
	}
	w.settle(msg, func(m jetstream.Msg) error { return m.NakWithDelay(fastRecheck) })
}

// startFastCopy starts the fast copy in msg if the lane admitted it when it
// claimed it (and charged it then) and this is its first delivery: it runs
// without being decided again. It reports whether it did; any other
// message is decided as usual.
func (w *Worker) startFastCopy(ctx, workCtx context.Context, msg jetstream.Msg) bool {
	if msg.Headers().Get(HeaderFast) != fastAdmitted {
		return false
	}
	job, err := readJob(msg, w.cfg.Tenant, w.cfg.CostHeader)
	if err != nil || job.Delivered != 1 {
		return false
	}
	w.stats.add(job.Tenant, func(s *TenantStats) { s.Delivered++ })
	f := &flight{msg: msg, started: time.Now(), log: w.log}
	w.inflight.Store(f, struct{}{})
	w.start(ctx, workCtx, f, job)
	return true
}

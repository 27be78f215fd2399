package consumer

// Fakes for the worker's unit tests. Each stands in for one dependency of
// a Worker and records what the worker did with it; each embeds the
// interface it fakes, so a method the worker is not expected to call
// panics instead of passing unnoticed. They model only the contracts the
// worker relies on, not how NATS or Redis behave.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/throttle"
)

// stored is when the fake messages were stored in their stream.
var stored = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// testStream is the stream the fake messages come from.
const testStream = "JOBS"

// waitFor bounds every wait for an event in these tests.
const waitFor = 5 * time.Second

// eventLog records, in order, events of several fakes, so that a test can
// check that one came before another (a copy stored before its original
// was acked). Safe for concurrent use; a nil *eventLog records nothing.
type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) add(format string, args ...any) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, fmt.Sprintf(format, args...))
}

// before reports whether event a was recorded, and before event b.
func (l *eventLog) before(a, b string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ia, ib := slices.Index(l.events, a), slices.Index(l.events, b)
	return ia >= 0 && ib >= 0 && ia < ib
}

func (l *eventLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprint(l.events)
}

// settlement is one thing the worker told JetStream to do with a delivered
// message.
type settlement struct {
	kind   string        // "ack", "nak", "nakDelay", "term" or "termReason"
	delay  time.Duration // of a nakDelay
	reason string        // of a termReason
}

func (s settlement) String() string {
	switch s.kind {
	case "nakDelay":
		return "nakDelay(" + s.delay.String() + ")"
	case "termReason":
		return "termReason(" + strconv.Quote(s.reason) + ")"
	}
	return s.kind
}

var (
	ack = settlement{kind: "ack"}
	nak = settlement{kind: "nak"}
)

func nakAfter(d time.Duration) settlement { return settlement{kind: "nakDelay", delay: d} }

// fakeMsg is one delivery of a message. It records every settlement and
// every InProgress, in order.
type fakeMsg struct {
	jetstream.Msg // nil: panics on a method the worker should not call

	subject string
	data    []byte
	header  nats.Header
	meta    jetstream.MsgMetadata
	log     *eventLog

	mu          sync.Mutex
	settlements []settlement
	inProgress  int
}

var _ jetstream.Msg = (*fakeMsg)(nil)

// newMsg returns the first delivery of the message stored at sequence seq
// of testStream on subj, with headers given as key, value pairs.
func newMsg(seq uint64, subj string, kv ...string) *fakeMsg {
	h := nats.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return &fakeMsg{
		subject: subj,
		data:    []byte("job " + strconv.FormatUint(seq, 10)),
		header:  h,
		meta: jetstream.MsgMetadata{
			Sequence:     jetstream.SequencePair{Stream: seq, Consumer: seq},
			NumDelivered: 1,
			Timestamp:    stored,
			Stream:       testStream,
			Consumer:     "worker",
		},
	}
}

// redelivered returns the next delivery of m, with nothing settled yet.
func (m *fakeMsg) redelivered() *fakeMsg {
	next := &fakeMsg{subject: m.subject, data: m.data, header: m.header, meta: m.meta, log: m.log}
	next.meta.NumDelivered++
	next.meta.Sequence.Consumer += 1000
	return next
}

// id is the job id the worker gives m when it carries no Throttler-Job-Id.
func (m *fakeMsg) id() string {
	return testStream + ":" + strconv.FormatUint(m.meta.Sequence.Stream, 10)
}

func (m *fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	meta := m.meta
	return &meta, nil
}
func (m *fakeMsg) Data() []byte         { return m.data }
func (m *fakeMsg) Headers() nats.Header { return m.header }
func (m *fakeMsg) Subject() string      { return m.subject }

func (m *fakeMsg) settle(s settlement) error {
	m.mu.Lock()
	m.settlements = append(m.settlements, s)
	m.mu.Unlock()
	m.log.add("%s %s", m.id(), s.kind)
	return nil
}

func (m *fakeMsg) Ack() error                         { return m.settle(ack) }
func (m *fakeMsg) Nak() error                         { return m.settle(nak) }
func (m *fakeMsg) NakWithDelay(d time.Duration) error { return m.settle(nakAfter(d)) }
func (m *fakeMsg) Term() error                        { return m.settle(settlement{kind: "term"}) }
func (m *fakeMsg) TermWithReason(reason string) error {
	return m.settle(settlement{kind: "termReason", reason: reason})
}

func (m *fakeMsg) InProgress() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inProgress++
	return nil
}

// settled returns the settlements so far.
func (m *fakeMsg) settled() []settlement {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.settlements)
}

// inProgresses is how many times the worker said m is still being worked on.
func (m *fakeMsg) inProgresses() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inProgress
}

// fakeConsumer hands out the messages pushed to it, a pushed group at a
// time (cut to the size the worker asks for). A pull with nothing to hand
// out ends after fetchWait with no messages, as a real pull ends at its
// expiry.
type fakeConsumer struct {
	jetstream.Consumer // nil: panics on a method the worker should not call

	ready chan struct{} // a push happened

	mu    sync.Mutex
	queue []*pushed
}

// fetchWait is how long a fake pull waits for a push.
const fetchWait = 10 * time.Millisecond

// pushed is a group of messages pushed together; taken is closed once the
// worker has taken every one of them off its pulls.
type pushed struct {
	msgs  []jetstream.Msg
	taken chan struct{}
}

func newFakeConsumer() *fakeConsumer { return &fakeConsumer{ready: make(chan struct{}, 1)} }

// push queues msgs for the worker's pulls.
func (c *fakeConsumer) push(msgs ...*fakeMsg) *pushed {
	p := &pushed{taken: make(chan struct{})}
	for _, m := range msgs {
		p.msgs = append(p.msgs, m)
	}
	c.mu.Lock()
	c.queue = append(c.queue, p)
	c.mu.Unlock()
	select {
	case c.ready <- struct{}{}:
	default:
	}
	return p
}

// Fetch implements jetstream.Consumer.
func (c *fakeConsumer) Fetch(n int, _ ...jetstream.FetchOpt) (jetstream.MessageBatch, error) {
	timer := time.NewTimer(fetchWait)
	defer timer.Stop()
	for {
		if b := c.next(n); b != nil {
			return b, nil
		}
		select {
		case <-c.ready:
		case <-timer.C:
			return newFakeBatch(nil, nil), nil
		}
	}
}

// next takes up to n messages of the first pushed group, or returns nil.
func (c *fakeConsumer) next(n int) *fakeBatch {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 {
		return nil
	}
	p := c.queue[0]
	if len(p.msgs) > n {
		msgs := p.msgs[:n]
		p.msgs = p.msgs[n:]
		return newFakeBatch(msgs, nil)
	}
	c.queue = c.queue[1:]
	return newFakeBatch(p.msgs, p.taken)
}

// fakeBatch is one pull's messages, all there from the start.
type fakeBatch struct {
	msgs chan jetstream.Msg
	done chan struct{} // closed by Error, if set
	once sync.Once
}

var _ jetstream.MessageBatch = (*fakeBatch)(nil)

func newFakeBatch(msgs []jetstream.Msg, done chan struct{}) *fakeBatch {
	b := &fakeBatch{msgs: make(chan jetstream.Msg, len(msgs)), done: done}
	for _, m := range msgs {
		b.msgs <- m
	}
	close(b.msgs)
	return b
}

// Messages implements jetstream.MessageBatch.
func (b *fakeBatch) Messages() <-chan jetstream.Msg { return b.msgs }

// Error implements jetstream.MessageBatch. The worker calls it after taking
// the last message, which is how a test knows every message of a push has
// been taken.
func (b *fakeBatch) Error() error {
	if b.done != nil {
		b.once.Do(func() { close(b.done) })
	}
	return nil
}

// fakeJS records the messages published through it: dead letters
// (PublishMsg) and moved copies (PublishMsgAsync). Set its errors before
// the worker runs.
type fakeJS struct {
	jetstream.JetStream // nil: panics on a method the worker should not call

	log        *eventLog
	publishErr error // PublishMsg fails with it
	asyncErr   error // PublishMsgAsync fails with it
	ackErr     error // an async publish's ack reports it

	mu        sync.Mutex
	published []*nats.Msg // by PublishMsg, failed or not
	async     []*nats.Msg // by PublishMsgAsync, failed or not
}

// Conn implements jetstream.JetStream: no connection, so the size of what
// is published is not checked against a server's limit.
func (js *fakeJS) Conn() *nats.Conn { return nil }

// PublishMsg implements jetstream.JetStream.
func (js *fakeJS) PublishMsg(_ context.Context, msg *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	js.mu.Lock()
	js.published = append(js.published, msg)
	n := len(js.published)
	js.mu.Unlock()
	if js.publishErr != nil {
		return nil, js.publishErr
	}
	js.log.add("publish %s", msg.Subject)
	return &jetstream.PubAck{Stream: "DLQ", Sequence: uint64(n)}, nil
}

// PublishMsgAsync implements jetstream.JetStream. The ack is ready at once.
func (js *fakeJS) PublishMsgAsync(msg *nats.Msg, _ ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	js.mu.Lock()
	js.async = append(js.async, msg)
	n := len(js.async)
	js.mu.Unlock()
	if js.asyncErr != nil {
		return nil, js.asyncErr
	}
	f := &fakeAck{msg: msg, ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1)}
	if js.ackErr != nil {
		f.err <- js.ackErr
	} else {
		js.log.add("publish %s", msg.Subject)
		f.ok <- &jetstream.PubAck{Stream: testStream, Sequence: uint64(1000 + n)}
	}
	return f, nil
}

// deadLetters returns the messages published with PublishMsg.
func (js *fakeJS) deadLetters() []*nats.Msg {
	js.mu.Lock()
	defer js.mu.Unlock()
	return slices.Clone(js.published)
}

// copies returns the messages published with PublishMsgAsync.
func (js *fakeJS) copies() []*nats.Msg {
	js.mu.Lock()
	defer js.mu.Unlock()
	return slices.Clone(js.async)
}

// fakeAck is an async publish's future.
type fakeAck struct {
	msg *nats.Msg
	ok  chan *jetstream.PubAck
	err chan error
}

func (f *fakeAck) Ok() <-chan *jetstream.PubAck { return f.ok }
func (f *fakeAck) Err() <-chan error            { return f.err }
func (f *fakeAck) Msg() *nats.Msg               { return f.msg }

// fakeDecider decides each job with decide, or admits it when decide is
// nil, and records every job it was asked about. Set decide before the
// worker runs.
type fakeDecider struct {
	decide func(ctx context.Context, c throttle.Copy) throttle.Result

	mu   sync.Mutex
	seen []throttle.Copy
}

// DecideBatch implements Decider.
func (d *fakeDecider) DecideBatch(ctx context.Context, copies []throttle.Copy) []throttle.Result {
	d.mu.Lock()
	d.seen = append(d.seen, copies...)
	d.mu.Unlock()
	res := make([]throttle.Result, len(copies))
	for i, c := range copies {
		if d.decide == nil {
			res[i] = result(throttle.Admitted, 0)
			continue
		}
		res[i] = d.decide(ctx, c)
	}
	return res
}

// asked returns the jobs the decider was asked about, in order.
func (d *fakeDecider) asked() []throttle.Copy {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.seen)
}

// result is a decision with outcome o and wait.
func result(o throttle.Outcome, wait time.Duration) throttle.Result {
	return throttle.Result{Decision: throttle.Decision{Outcome: o, Wait: wait}}
}

// redisFailure is the result of a decision Redis failed to make.
func redisFailure(err error) throttle.Result {
	return throttle.Result{Err: &throttle.RedisError{Op: "fcall", Err: err}}
}

// failedCall is one call of a FailureCounter.
type failedCall struct {
	tenant, jobID         string
	incarnation, giveUpAt int64
}

// fakeFailures counts failures per job id, or fails with err when set.
type fakeFailures struct {
	err error

	mu     sync.Mutex
	counts map[string]int64
	calls  []failedCall
}

// Failed implements FailureCounter.
func (f *fakeFailures) Failed(_ context.Context, tenant, jobID string, incarnation, giveUpAt int64) (int64, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, failedCall{tenant: tenant, jobID: jobID, incarnation: incarnation, giveUpAt: giveUpAt})
	if f.err != nil {
		return 0, false, f.err
	}
	if f.counts == nil {
		f.counts = map[string]int64{}
	}
	f.counts[jobID]++
	n := f.counts[jobID]
	return n, n < giveUpAt, nil
}

// called returns the calls so far.
func (f *fakeFailures) called() []failedCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// fakeDeferrer records each deferral, then defers it with NakDeferrer.
type fakeDeferrer struct {
	mu   sync.Mutex
	seen []Deferral
}

// Defer implements Deferrer.
func (d *fakeDeferrer) Defer(ctx context.Context, ds []Deferral) {
	NakDeferrer{}.Defer(ctx, ds)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seen = append(d.seen, ds...)
}

func (d *fakeDeferrer) deferred() []Deferral {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.seen)
}

// fakeClaims records the originals it is given to settle, and settles none.
type fakeClaims struct {
	mu   sync.Mutex
	jobs []Job
}

// SettleClaimed implements ClaimSettler.
func (c *fakeClaims) SettleClaimed(_ context.Context, _ jetstream.Msg, job Job) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.jobs = append(c.jobs, job)
}

func (c *fakeClaims) given() []Job {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.jobs)
}

// fakeClock is a clock that moves only when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// handled records the jobs a handler ran, in the order they started.
type handled struct {
	mu   sync.Mutex
	jobs []Job
}

func (h *handled) add(job Job) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.jobs = append(h.jobs, job)
}

// all returns the jobs run so far.
func (h *handled) all() []Job {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.jobs)
}

// ids returns the ids of the jobs run so far.
func (h *handled) ids() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := make([]string, len(h.jobs))
	for i, j := range h.jobs {
		ids[i] = j.ID
	}
	return ids
}

// workerEnv is a Worker wired to fakes. Adjust params and the fakes, then
// start it.
type workerEnv struct {
	t        *testing.T
	params   Params
	log      *eventLog
	js       *fakeJS
	cons     *fakeConsumer
	decider  *fakeDecider
	failures *fakeFailures
	ran      *handled // jobs the default handler ran

	w      *Worker
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returns
	runErr error
}

// setup returns a workerEnv whose worker, once started, admits every job
// and runs it through a handler that succeeds. Its cleanup stops the
// worker and checks that none of the worker's goroutines outlive Run.
func setup(t *testing.T) *workerEnv {
	t.Helper()
	before := goleak.IgnoreCurrent()
	e := &workerEnv{
		t:        t,
		log:      &eventLog{},
		cons:     newFakeConsumer(),
		decider:  &fakeDecider{},
		failures: &fakeFailures{},
		ran:      &handled{},
	}
	e.js = &fakeJS{log: e.log}
	e.params = Params{
		JetStream: e.js,
		Consumer:  e.cons,
		Decider:   e.decider,
		Failures:  e.failures,
		Handler: func(_ context.Context, job Job) error {
			e.ran.add(job)
			return nil
		},
		Config: Config{
			Logger:       slog.New(slog.DiscardHandler),
			Concurrency:  4,
			RetryInitial: time.Second,
			RetryMax:     time.Minute,
			// Long enough that no test runs into it unless it means to.
			ShutdownTimeout: waitFor,
		},
	}
	t.Cleanup(func() {
		e.stop()
		goleak.VerifyNone(t, before)
	})
	return e
}

// start builds the worker from params and runs it.
func (e *workerEnv) start() {
	e.t.Helper()
	w, err := New(e.params)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	e.w = w
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.done = make(chan struct{})
	go func() {
		defer close(e.done)
		e.runErr = w.Run(ctx)
	}()
}

// push queues msgs for the worker, as one pull's worth, each recording
// its settlements in the env's event log.
func (e *workerEnv) push(msgs ...*fakeMsg) *pushed {
	for _, m := range msgs {
		m.log = e.log
	}
	return e.cons.push(msgs...)
}

// stop cancels Run's context and waits for Run to return; it fails the
// test if Run returns an error or takes longer than waitFor. Calling it
// again does nothing.
func (e *workerEnv) stop() {
	e.t.Helper()
	if e.w == nil {
		return
	}
	e.cancel()
	select {
	case <-e.done:
	case <-time.After(waitFor):
		e.t.Fatalf("Run did not return within %s of its context's cancellation", waitFor)
	}
	if e.runErr != nil {
		e.t.Fatalf("Run: %v", e.runErr)
	}
}

// running reports whether Run has not returned.
func (e *workerEnv) running() bool {
	select {
	case <-e.done:
		return false
	default:
		return true
	}
}

// waitSettled waits until every message of msgs has a settlement.
func (e *workerEnv) waitSettled(msgs ...*fakeMsg) {
	e.t.Helper()
	for _, m := range msgs {
		testenv.Eventually(e.t, waitFor, "job "+m.id()+" settled", func() bool { return len(m.settled()) > 0 })
	}
}

// waitTaken waits until the worker has taken every message of p.
func (e *workerEnv) waitTaken(p *pushed) {
	e.t.Helper()
	select {
	case <-p.taken:
	case <-time.After(waitFor):
		e.t.Fatalf("the worker did not take %d pushed messages within %s", len(p.msgs), waitFor)
	}
}

// stats returns tenant's counts.
func (e *workerEnv) stats(tenant string) TenantStats { return e.w.Stats()[tenant] }

// wantSettled fails the test unless m was settled exactly as want says.
func wantSettled(t *testing.T, m *fakeMsg, want ...settlement) {
	t.Helper()
	if got := m.settled(); !slices.Equal(got, want) {
		t.Errorf("job %s settled %v, want %v", m.id(), got, want)
	}
}

// wantNakWithin fails the test unless m was settled once, by a NAK with a
// delay in [lo, hi], and returns the delay.
func wantNakWithin(t *testing.T, m *fakeMsg, lo, hi time.Duration) time.Duration {
	t.Helper()
	got := m.settled()
	if len(got) != 1 || got[0].kind != "nakDelay" || got[0].delay < lo || got[0].delay > hi {
		t.Errorf("job %s settled %v, want one nakDelay in [%s, %s]", m.id(), got, lo, hi)
		return 0
	}
	return got[0].delay
}

// errBoom is a handler's failure.
var errBoom = errors.New("boom")

// newSignal returns a channel and a func that closes it once. The test's
// cleanup closes it too, before the worker is stopped, so that a test
// failing early does not leave a handler waiting on it.
func newSignal(t *testing.T) (chan struct{}, func()) {
	ch := make(chan struct{})
	var once sync.Once
	closeIt := func() { once.Do(func() { close(ch) }) }
	t.Cleanup(closeIt)
	return ch, closeIt
}

// await waits for ch to be closed, failing the test after waitFor.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitFor):
		t.Fatalf("timed out after %s waiting for %s", waitFor, what)
	}
}

package fastlane

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/throttler/throttler/subject"
	"github.com/throttler/throttler/tenant"
	"github.com/throttler/throttler/throttle"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// BenchmarkArrivals runs an in-process nats-server, which leaves a
		// few global goroutines behind after shutdown.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine.func1"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*Server).logRejectedTLSConns"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// The fakes below embed the jetstream interfaces they stand for and
// implement only the methods the lane calls; any other call panics on the
// nil interface, which shows at once that the lane's use of NATS changed.

// clock is a fake clock, moved only by the test.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

// t0 is when every fake clock starts.
var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func newClock() *clock { return &clock{now: t0} }

// Now is the clock's time; pass it as Config.Now.
func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock on by d.
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fakeMsg is a message delivered by a consumer: an arrival, or an original
// handed to Claims. It records how it was settled.
type fakeMsg struct {
	jetstream.Msg
	subject string
	header  nats.Header
	meta    *jetstream.MsgMetadata
	metaErr error

	mu      sync.Mutex
	settled []string // "ack", "nak", "nak+<delay>"
}

// arrivalMsg is an arrival of the job stored in stream JOBS at seq, at
// stored, on subj.
func arrivalMsg(subj string, seq uint64, stored time.Time, hdr ...string) *fakeMsg {
	h := nats.Header{}
	for i := 0; i+1 < len(hdr); i += 2 {
		h.Add(hdr[i], hdr[i+1])
	}
	return &fakeMsg{subject: subj, header: h, meta: &jetstream.MsgMetadata{Stream: "JOBS",
		Sequence: jetstream.SequencePair{Stream: seq, Consumer: seq}, NumDelivered: 1, Timestamp: stored}}
}

func (m *fakeMsg) Subject() string      { return m.subject }
func (m *fakeMsg) Headers() nats.Header { return m.header }
func (m *fakeMsg) Data() []byte         { return nil }

func (m *fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	if m.metaErr != nil {
		return nil, m.metaErr
	}
	return m.meta, nil
}

func (m *fakeMsg) settle(how string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.settled = append(m.settled, how)
	return nil
}

func (m *fakeMsg) Ack() error { return m.settle("ack") }
func (m *fakeMsg) Nak() error { return m.settle("nak") }
func (m *fakeMsg) NakWithDelay(d time.Duration) error {
	return m.settle("nak+" + d.String())
}

// settlements returns how the message was settled, in order.
func (m *fakeMsg) settlements() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.settled...)
}

// fakeStream is the jobs stream: the messages it stores by sequence, the
// subjects of the copies it stores, and what it was asked.
type fakeStream struct {
	jetstream.Stream
	name string

	mu      sync.Mutex
	msgs    map[uint64]*jetstream.RawStreamMsg
	copies  map[string]bool // subjects of stored copies
	lastErr error           // GetLastMsgForSubject fails with it
	lastSeq uint64          // the last sequence Info reports
	deleted []uint64
	asked   []string // subjects GetLastMsgForSubject was asked for
}

func newFakeStream() *fakeStream {
	return &fakeStream{name: "JOBS", msgs: map[uint64]*jetstream.RawStreamMsg{}, copies: map[string]bool{}}
}

func (s *fakeStream) CachedInfo() *jetstream.StreamInfo {
	return &jetstream.StreamInfo{Config: jetstream.StreamConfig{Name: s.name}}
}

func (s *fakeStream) Info(context.Context, ...jetstream.StreamInfoOpt) (*jetstream.StreamInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &jetstream.StreamInfo{Config: jetstream.StreamConfig{Name: s.name}, State: jetstream.StreamState{LastSeq: s.lastSeq}}, nil
}

// store stores a job on subj at seq.
func (s *fakeStream) store(subj string, seq uint64, data string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs[seq] = &jetstream.RawStreamMsg{Subject: subj, Sequence: seq, Data: []byte(data), Header: nats.Header{}, Time: t0}
}

func (s *fakeStream) GetMsg(_ context.Context, seq uint64, _ ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.msgs[seq]
	if !ok {
		return nil, jetstream.ErrMsgNotFound
	}
	return m, nil
}

func (s *fakeStream) DeleteMsg(_ context.Context, seq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.msgs[seq]; !ok {
		return jetstream.ErrMsgNotFound
	}
	delete(s.msgs, seq)
	s.deleted = append(s.deleted, seq)
	return nil
}

func (s *fakeStream) GetLastMsgForSubject(_ context.Context, subj string) (*jetstream.RawStreamMsg, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, subj)
	switch {
	case s.lastErr != nil:
		return nil, s.lastErr
	case s.copies[subj]:
		return &jetstream.RawStreamMsg{Subject: subj}, nil
	}
	return nil, jetstream.ErrMsgNotFound
}

// has reports whether the stream still stores seq.
func (s *fakeStream) has(seq uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.msgs[seq]
	return ok
}

// fakeConsumer is a consumer: the jobs consumer (Info gives its position),
// the copies consumer, or the arrivals consumer (Consume records the
// handler and the options).
type fakeConsumer struct {
	jetstream.Consumer
	info *jetstream.ConsumerInfo

	mu       sync.Mutex
	infoErr  error
	handler  jetstream.MessageHandler
	errFunc  jetstream.ConsumeErrHandler
	contexts []*fakeConsumeContext
}

func (c *fakeConsumer) CachedInfo() *jetstream.ConsumerInfo { return c.info }

func (c *fakeConsumer) Info(context.Context) (*jetstream.ConsumerInfo, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.infoErr != nil {
		return nil, c.infoErr
	}
	info := *c.info
	return &info, nil
}

// delivered sets the stream sequence the jobs consumer has delivered to.
func (c *fakeConsumer) delivered(seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.info.Delivered.Stream = seq
}

func (c *fakeConsumer) Consume(h jetstream.MessageHandler, opts ...jetstream.PullConsumeOpt) (jetstream.ConsumeContext, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handler = h
	for _, o := range opts {
		if f, ok := o.(jetstream.ConsumeErrHandler); ok {
			c.errFunc = f
		}
	}
	cc := &fakeConsumeContext{}
	c.contexts = append(c.contexts, cc)
	return cc, nil
}

// consumes returns the consume contexts started on the consumer.
func (c *fakeConsumer) consumes() []*fakeConsumeContext {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*fakeConsumeContext(nil), c.contexts...)
}

// fakeConsumeContext records whether it was stopped.
type fakeConsumeContext struct {
	jetstream.ConsumeContext
	mu      sync.Mutex
	stopped int
}

func (c *fakeConsumeContext) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped++
}

func (c *fakeConsumeContext) stops() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopped
}

// fakeJetStream manages the arrivals consumer and publishes copies.
type fakeJetStream struct {
	jetstream.JetStream
	stream *fakeStream // where published copies are stored

	mu         sync.Mutex
	existing   *fakeConsumer // the arrivals consumer, when it exists
	lookupErr  error         // Consumer fails with it
	createErr  error         // CreateConsumer fails with it
	created    []jetstream.ConsumerConfig
	deletedCon []string
	lookups    int
	lookupHook func(n int) // called after the n-th lookup, with the lock held
	published  []*nats.Msg
	publishErr error // PublishMsgAsync refuses with it
	ackErr     error // the publish's future fails with it
}

func (js *fakeJetStream) Consumer(_ context.Context, _, _ string) (jetstream.Consumer, error) {
	js.mu.Lock()
	defer js.mu.Unlock()
	js.lookups++
	defer func() {
		if js.lookupHook != nil {
			js.lookupHook(js.lookups)
		}
	}()
	switch {
	case js.lookupErr != nil:
		return nil, js.lookupErr
	case js.existing == nil:
		return nil, jetstream.ErrConsumerNotFound
	}
	return js.existing, nil
}

func (js *fakeJetStream) CreateConsumer(_ context.Context, _ string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	js.mu.Lock()
	defer js.mu.Unlock()
	js.created = append(js.created, cfg)
	if js.createErr != nil {
		return nil, js.createErr
	}
	if js.existing != nil {
		return nil, jetstream.ErrConsumerExists
	}
	js.existing = &fakeConsumer{info: &jetstream.ConsumerInfo{Name: cfg.Durable, Config: cfg}}
	return js.existing, nil
}

func (js *fakeJetStream) DeleteConsumer(_ context.Context, _, name string) error {
	js.mu.Lock()
	defer js.mu.Unlock()
	js.deletedCon = append(js.deletedCon, name)
	js.existing = nil
	return nil
}

// arrivals returns the arrivals consumer, nil when it does not exist.
func (js *fakeJetStream) arrivals() *fakeConsumer {
	js.mu.Lock()
	defer js.mu.Unlock()
	return js.existing
}

func (js *fakeJetStream) PublishMsgAsync(m *nats.Msg, _ ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.publishErr != nil {
		return nil, js.publishErr
	}
	f := &fakeFuture{msg: m, ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1)}
	if js.ackErr != nil {
		f.err <- js.ackErr
		return f, nil
	}
	js.published = append(js.published, m)
	js.stream.mu.Lock()
	js.stream.copies[m.Subject] = true
	js.stream.mu.Unlock()
	f.ok <- &jetstream.PubAck{Stream: js.stream.name}
	return f, nil
}

// copies returns the messages published.
func (js *fakeJetStream) copies() []*nats.Msg {
	js.mu.Lock()
	defer js.mu.Unlock()
	return append([]*nats.Msg(nil), js.published...)
}

// fakeFuture is a publish's future, settled when made.
type fakeFuture struct {
	msg *nats.Msg
	ok  chan *jetstream.PubAck
	err chan error
}

func (f *fakeFuture) Ok() <-chan *jetstream.PubAck { return f.ok }
func (f *fakeFuture) Err() <-chan error            { return f.err }
func (f *fakeFuture) Msg() *nats.Msg               { return f.msg }

// fakeOwners decides each job with the outcome set for its tenant
// (Admitted when none is) and records claims and releases.
type fakeOwners struct {
	mu         sync.Mutex
	outcome    map[string]throttle.Outcome
	decideErr  error
	claimOK    bool
	claimErr   error
	releaseErr error
	decided    []throttle.Copy
	claimed    []string
	released   []string // "<tenant> <job> <incarnation>"
}

func newFakeOwners() *fakeOwners {
	return &fakeOwners{outcome: map[string]throttle.Outcome{}, claimOK: true}
}

func (o *fakeOwners) DecideBatch(_ context.Context, copies []throttle.Copy) []throttle.Result {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.decided = append(o.decided, copies...)
	res := make([]throttle.Result, len(copies))
	for i, c := range copies {
		if o.decideErr != nil {
			res[i].Err = o.decideErr
			continue
		}
		res[i].Outcome = throttle.Admitted
		if oc, ok := o.outcome[c.Tenant]; ok {
			res[i].Outcome = oc
		}
	}
	return res
}

func (o *fakeOwners) Claim(_ context.Context, tenant, jobID string, _ int64) (bool, int64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.claimed = append(o.claimed, tenant+" "+jobID)
	return o.claimOK, 0, o.claimErr
}

func (o *fakeOwners) Release(_ context.Context, tenant, jobID string, incarnation int64) (bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.releaseErr != nil {
		return false, o.releaseErr
	}
	o.released = append(o.released, tenant+" "+jobID+" "+strconv.FormatInt(incarnation, 10))
	return true, nil
}

// releases returns the claims given up.
func (o *fakeOwners) releases() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.released...)
}

// testLane is one test's lane over fakes, with its clock.
type testLane struct {
	*Lane
	clock  *clock
	js     *fakeJetStream
	stream *fakeStream
	jobs   *fakeConsumer
	owners *fakeOwners
}

// discard is a logger that drops everything.
var discard = slog.New(slog.DiscardHandler)

// newTestLane returns a lane over fakes, on a fake clock, with a backlog
// threshold of 100 and a tenant share of 2, the jobs consumer last seen at
// stream sequence 1000 with pending jobs left to deliver; change sets more
// of its configuration first.
func newTestLane(t *testing.T, pending uint64, change ...func(*Config)) *testLane {
	t.Helper()
	clk := newClock()
	stream := newFakeStream()
	js := &fakeJetStream{stream: stream}
	jobs := &fakeConsumer{info: &jetstream.ConsumerInfo{Name: "workers", Delivered: jetstream.SequenceInfo{Stream: 1000}}}
	owners := newFakeOwners()
	cfg := Config{
		JetStream:   js,
		Stream:      stream,
		Jobs:        jobs,
		Copies:      &fakeConsumer{info: &jetstream.ConsumerInfo{Name: "workers_fast"}},
		Arrivals:    "workers_arrivals",
		JobSubjects: []string{"jobs.>"},
		Subjects:    subject.Schedules("sched"),
		Tenant:      tenant.FromSubject(2),
		CostHeader:  "Job-Cost",
		Decider:     owners,
		Owners:      owners,
		Log:         discard,
		Now:         clk.Now,
		Backlog:     100,
		TenantShare: 2,
	}
	for _, f := range change {
		f(&cfg)
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	l.Observe(1000, pending)
	return &testLane{Lane: l, clock: clk, js: js, stream: stream, jobs: jobs, owners: owners}
}

// errBoom is a failure no caller expects.
var errBoom = errors.New("boom")

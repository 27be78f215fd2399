package fastlane

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/tenant"
	"github.com/throttler/throttler/throttle"
)

// TestLaneNewNamesWhatIsMissing: New refuses a Config without a required
// field, naming each one missing and none that is set.
func TestLaneNewNamesWhatIsMissing(t *testing.T) {
	full := newTestLane(t, 0).cfg
	required := []struct {
		name  string
		unset func(*Config)
	}{
		{"JetStream", func(c *Config) { c.JetStream = nil }},
		{"Stream", func(c *Config) { c.Stream = nil }},
		{"Jobs", func(c *Config) { c.Jobs = nil }},
		{"Copies", func(c *Config) { c.Copies = nil }},
		{"Arrivals", func(c *Config) { c.Arrivals = "" }},
		{"JobSubjects", func(c *Config) { c.JobSubjects = nil }},
		{"Subjects", func(c *Config) { c.Subjects = "" }},
		{"Tenant", func(c *Config) { c.Tenant = tenant.Source{} }},
		{"CostHeader", func(c *Config) { c.CostHeader = "" }},
		{"Decider", func(c *Config) { c.Decider = nil }},
		{"Owners", func(c *Config) { c.Owners = nil }},
	}
	for _, r := range required {
		t.Run(r.name, func(t *testing.T) {
			cfg := full
			r.unset(&cfg)
			l, err := New(cfg)
			if err == nil || l != nil {
				t.Fatalf("New without %s: %v, %v; want an error", r.name, l, err)
			}
			for _, other := range required {
				named := slices.Contains(strings.FieldsFunc(err.Error(), notIdent), other.name)
				if named != (other.name == r.name) {
					t.Errorf("New without %s: %q names %s: %v", r.name, err, other.name, named)
				}
			}
		})
	}
	t.Run("all", func(t *testing.T) {
		_, err := New(Config{})
		if err == nil {
			t.Fatal("New(Config{}): no error")
		}
		for _, r := range required {
			if !slices.Contains(strings.FieldsFunc(err.Error(), notIdent), r.name) {
				t.Errorf("New(Config{}): %q does not name %s", err, r.name)
			}
		}
	})
}

// notIdent splits an error's text into words.
func notIdent(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_')
}

// TestLaneNewDefaults: every optional field left zero takes its default; set
// ones are kept, and a negative MoveRate (no cap) too.
func TestLaneNewDefaults(t *testing.T) {
	cfg := newTestLane(t, 0).cfg
	cfg.Stats, cfg.Log, cfg.Now = nil, nil, nil
	cfg.Backlog, cfg.TenantShare, cfg.MoveRate = 0, 0, 0
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := l.cfg
	if got.Backlog != 256 || got.TenantShare != 16 || got.MoveRate != DefaultMoveRate || got.IdleOff != time.Minute ||
		got.ArrivalsIdle != 30*time.Second || got.Deadline != 4*time.Second {
		t.Errorf("defaults: Backlog %d, TenantShare %d, MoveRate %d, IdleOff %v, ArrivalsIdle %v, Deadline %v; want 256, 16, %d, 1m, 30s, 4s",
			got.Backlog, got.TenantShare, got.MoveRate, got.IdleOff, got.ArrivalsIdle, got.Deadline, DefaultMoveRate)
	}
	if got.Stats == nil || got.Log == nil || got.Now == nil {
		t.Errorf("defaults: Stats %v, Log %v, Now set %v; want all set", got.Stats, got.Log, got.Now != nil)
	}
	if d := time.Since(got.Now()); d < 0 || d > time.Minute {
		t.Errorf("the default clock is %v off time.Now", d)
	}

	cfg.Backlog, cfg.TenantShare, cfg.MoveRate, cfg.IdleOff, cfg.ArrivalsIdle, cfg.Deadline = 7, 3, -1, time.Hour, time.Second, time.Millisecond
	l, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got = l.cfg
	if got.Backlog != 7 || got.TenantShare != 3 || got.MoveRate != -1 || got.IdleOff != time.Hour ||
		got.ArrivalsIdle != time.Second || got.Deadline != time.Millisecond {
		t.Errorf("set fields changed: %+v", got)
	}
}

// TestLaneIdle: the lane counts as idle once the jobs consumer has had no
// backlog for IdleOff: from New until a backlog is seen, and from the
// first delivery under the threshold after one.
func TestLaneIdle(t *testing.T) {
	l := newTestLane(t, 0, func(c *Config) { c.IdleOff = time.Minute }) // no backlog since New
	if l.idle() {
		t.Fatal("idle at once")
	}
	l.clock.Advance(time.Minute)
	if !l.idle() {
		t.Fatal("not idle after IdleOff without a backlog")
	}
	l.Observe(2000, 5000) // a backlog
	if l.idle() {
		t.Fatal("idle with a backlog")
	}
	l.clock.Advance(time.Hour)
	if l.idle() {
		t.Fatal("idle with the backlog last seen an hour ago")
	}
	l.Observe(3000, 99) // under the threshold of 100 ...
	l.clock.Advance(30 * time.Second)
	l.Observe(4000, 0) // ... still: the time counts from the first
	l.clock.Advance(30*time.Second - time.Nanosecond)
	if l.idle() {
		t.Fatal("idle before IdleOff without a backlog")
	}
	l.clock.Advance(time.Nanosecond)
	if !l.idle() {
		t.Fatal("not idle after IdleOff without a backlog")
	}
}

// TestLaneObserveWakes: a delivery that leaves a backlog asks Run to read
// arrivals, unless the lane already reads them; one wake is enough for
// any number of deliveries.
func TestLaneObserveWakes(t *testing.T) {
	l := newTestLane(t, 0)
	l.Observe(1500, 99)
	if len(l.wake) != 0 {
		t.Fatal("woke Run without a backlog")
	}
	l.Observe(2000, 100)
	l.Observe(2100, 5000)
	if len(l.wake) != 1 {
		t.Fatalf("%d wakes queued after two deliveries with a backlog, want 1", len(l.wake))
	}
	<-l.wake
	l.reading.Store(true)
	l.Observe(2200, 5000)
	if len(l.wake) != 0 {
		t.Fatal("woke Run while it reads arrivals")
	}
}

// TestLaneStartReading: reading arrivals creates the lane's consumer as the
// fleet shares it (headers only, no acks, from just after the jobs
// consumer's position, one replica in memory, deleted after ArrivalsIdle
// without a reader) and consumes it once; stopReading stops it.
func TestLaneStartReading(t *testing.T) {
	for _, subjects := range [][]string{{"jobs.>"}, {"jobs.>", "tasks.*"}} {
		t.Run(strings.Join(subjects, ","), func(t *testing.T) {
			l := newTestLane(t, 5000, func(c *Config) { c.JobSubjects = subjects; c.ArrivalsIdle = 45 * time.Second })
			ctx := context.Background()
			l.startReading(ctx)
			if !l.reading.Load() {
				t.Fatal("not reading after a start")
			}
			if len(l.js.created) != 1 {
				t.Fatalf("%d consumers created, want 1", len(l.js.created))
			}
			got := l.js.created[0]
			want := jetstream.ConsumerConfig{Durable: "workers_arrivals", AckPolicy: jetstream.AckNonePolicy,
				DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: 1001, HeadersOnly: true,
				InactiveThreshold: 45 * time.Second, Replicas: 1, MemoryStorage: true}
			if len(subjects) == 1 {
				want.FilterSubject = subjects[0]
			} else {
				want.FilterSubjects = subjects
			}
			if !equalConsumerConfig(got, want) {
				t.Errorf("arrivals consumer\n got  %+v\n want %+v", got, want)
			}
			l.startReading(ctx) // reading already
			cc := l.js.arrivals().consumes()
			if len(l.js.created) != 1 || len(cc) != 1 {
				t.Fatalf("a second start created %d consumers and consumed %d times, want 1 and 1", len(l.js.created), len(cc))
			}
			l.stopReading()
			if l.reading.Load() || cc[0].stops() != 1 {
				t.Fatalf("after stopReading: reading %v, stopped %d times; want false, 1", l.reading.Load(), cc[0].stops())
			}
			l.stopReading() // not reading: nothing to stop
			if cc[0].stops() != 1 {
				t.Fatalf("stopped %d times, want 1", cc[0].stops())
			}
		})
	}
}

// equalConsumerConfig compares the fields the lane sets.
func equalConsumerConfig(a, b jetstream.ConsumerConfig) bool {
	return a.Durable == b.Durable && a.AckPolicy == b.AckPolicy && a.DeliverPolicy == b.DeliverPolicy && a.OptStartSeq == b.OptStartSeq &&
		a.HeadersOnly == b.HeadersOnly && a.InactiveThreshold == b.InactiveThreshold && a.Replicas == b.Replicas &&
		a.MemoryStorage == b.MemoryStorage && a.FilterSubject == b.FilterSubject && slices.Equal(a.FilterSubjects, b.FilterSubjects)
}

// TestLaneStartReadingBindsTheFleets: a lane binds the arrivals consumer
// another lane created, or one left from an earlier backlog, as it is; a
// lane that loses the race to create it binds the winner's.
func TestLaneStartReadingBindsTheFleets(t *testing.T) {
	ctx := context.Background()
	t.Run("bound", func(t *testing.T) {
		l := newTestLane(t, 5000)
		c := &fakeConsumer{info: &jetstream.ConsumerInfo{Name: "workers_arrivals", NumPending: 1_000_000}}
		l.js.existing = c
		l.startReading(ctx)
		if !l.reading.Load() || len(l.js.created) != 0 || len(l.js.deletedCon) != 0 || len(c.consumes()) != 1 {
			t.Fatalf("reading %v, created %d, deleted %v, consumed %d; want true, 0, none, 1",
				l.reading.Load(), len(l.js.created), l.js.deletedCon, len(c.consumes()))
		}
	})
	t.Run("lost the race", func(t *testing.T) {
		l := newTestLane(t, 5000)
		winner := &fakeConsumer{info: &jetstream.ConsumerInfo{Name: "workers_arrivals"}}
		l.js.lookupHook = func(n int) {
			if n == 1 {
				l.js.existing = winner // created between the lookup and the create
			}
		}
		l.startReading(ctx)
		if !l.reading.Load() || len(winner.consumes()) != 1 {
			t.Fatalf("reading %v, the winner's consumer consumed %d times; want true, 1", l.reading.Load(), len(winner.consumes()))
		}
	})
}

// TestLaneStartReadingRetriesAfterAFailure: a start that fails is not tried
// again for retryReading (on the lane's clock), nor is one refused because
// another consumer reads the job subjects, which is logged.
func TestLaneStartReadingRetriesAfterAFailure(t *testing.T) {
	ctx := context.Background()
	t.Run("lookup fails", func(t *testing.T) {
		l := newTestLane(t, 5000)
		l.js.lookupErr = errBoom
		l.startReading(ctx)
		l.startReading(ctx)
		if l.reading.Load() || l.js.lookups != 1 || len(l.js.created) != 0 {
			t.Fatalf("reading %v, %d lookups, %d created; want false, 1, 0", l.reading.Load(), l.js.lookups, len(l.js.created))
		}
		l.clock.Advance(retryReading - time.Nanosecond)
		l.startReading(ctx)
		if l.js.lookups != 1 {
			t.Fatalf("tried again within retryReading")
		}
		l.clock.Advance(time.Nanosecond)
		l.js.lookupErr = nil
		l.startReading(ctx)
		if !l.reading.Load() || l.js.lookups != 2 {
			t.Fatalf("after retryReading: reading %v, %d lookups; want true, 2", l.reading.Load(), l.js.lookups)
		}
	})
	t.Run("create fails", func(t *testing.T) {
		l := newTestLane(t, 5000)
		l.js.createErr = errBoom
		l.startReading(ctx)
		if l.reading.Load() || len(l.js.created) != 1 {
			t.Fatalf("reading %v, %d creates; want false, 1", l.reading.Load(), len(l.js.created))
		}
		l.startReading(ctx)
		if len(l.js.created) != 1 {
			t.Fatalf("tried again within retryReading")
		}
	})
	t.Run("another reader", func(t *testing.T) {
		var lg testenv.Buffer
		other := "audit"
		calls := 0
		l := newTestLane(t, 5000, func(c *Config) {
			c.Log = slog.New(slog.NewTextHandler(&lg, &slog.HandlerOptions{Level: slog.LevelDebug}))
			c.OtherReaders = func(context.Context) (string, error) { calls++; return other, nil }
		})
		l.startReading(ctx)
		if l.reading.Load() || l.js.lookups != 0 || calls != 1 {
			t.Fatalf("reading %v, %d lookups, %d checks; want false, 0, 1", l.reading.Load(), l.js.lookups, calls)
		}
		if s := lg.String(); !strings.Contains(s, "fast lane: not reading arrivals") || !strings.Contains(s, "consumer=audit") {
			t.Errorf("logged %q, want the warning naming consumer audit", s)
		}
		l.startReading(ctx)
		if calls != 1 {
			t.Fatal("checked again within retryReading")
		}
		l.clock.Advance(retryReading)
		other = "" // the audit consumer is gone
		l.startReading(ctx)
		if !l.reading.Load() || calls != 2 {
			t.Fatalf("after retryReading with no other reader: reading %v, %d checks; want true, 2", l.reading.Load(), calls)
		}
	})
	t.Run("readers unknown", func(t *testing.T) {
		l := newTestLane(t, 5000, func(c *Config) {
			c.OtherReaders = func(context.Context) (string, error) { return "", errBoom }
		})
		l.startReading(ctx)
		if l.reading.Load() || l.js.lookups != 0 {
			t.Fatalf("read arrivals not knowing the stream's other consumers")
		}
	})
}

// TestLaneReadingEndsWithTheConsumer: when the server deletes the arrivals
// consumer under the lane (another lane replaced it), the lane counts as
// not reading, and the next backlog starts reading again.
func TestLaneReadingEndsWithTheConsumer(t *testing.T) {
	ctx := context.Background()
	l := newTestLane(t, 5000)
	l.startReading(ctx)
	first := l.js.arrivals()
	first.errFunc(nil, jetstream.ErrNoHeartbeat) // passing: still reading
	if !l.reading.Load() {
		t.Fatal("not reading after a missed heartbeat")
	}
	l.js.existing = nil // deleted on the server
	first.errFunc(nil, jetstream.ErrConsumerDeleted)
	if l.reading.Load() {
		t.Fatal("reading after the consumer was deleted")
	}
	l.Observe(2000, 5000)
	if len(l.wake) != 1 {
		t.Fatal("a backlog did not wake Run once the consumer was gone")
	}
	l.startReading(ctx)
	if !l.reading.Load() || len(l.js.created) != 2 {
		t.Fatalf("reading %v, %d consumers created; want true, 2", l.reading.Load(), len(l.js.created))
	}
}

// TestLaneRun: Run starts reading arrivals when Observe sees a backlog, stops
// once the lane is idle, takes the jobs arrivals book, and stops reading
// when ctx is cancelled.
func TestLaneRun(t *testing.T) {
	l := newTestLane(t, 0, func(c *Config) { c.IdleOff = 40 * time.Millisecond }) // ticks every 10ms
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// A backlog: Run reads arrivals.
	l.Observe(2000, 5000)
	testenv.Eventually(t, 5*time.Second, "Run reading arrivals", func() bool {
		c := l.js.arrivals()
		return c != nil && len(c.consumes()) == 1 && l.reading.Load()
	})
	arrivals := l.js.arrivals()

	// A job of b arrives: Run copies it out and deletes the original.
	l.stream.store("jobs.b", 2001, "job of b")
	arrivals.handler(arrivalMsg("jobs.b", 2001, l.clock.Now()))
	testenv.Eventually(t, 5*time.Second, "b's original deleted", func() bool { return !l.stream.has(2001) })
	if copies := l.js.copies(); len(copies) != 1 || copies[0].Subject != "sched.f.b.2001" {
		t.Fatalf("copies %v, want one on sched.f.b.2001", copies)
	}

	// The backlog is gone for IdleOff: Run stops reading.
	l.Observe(3000, 0)
	l.clock.Advance(40 * time.Millisecond)
	cc := arrivals.consumes()[0]
	testenv.Eventually(t, 5*time.Second, "Run to stop reading arrivals", func() bool { return cc.stops() == 1 && !l.reading.Load() })

	// Another backlog: it reads again, until ctx is cancelled.
	l.Observe(4000, 5000)
	testenv.Eventually(t, 5*time.Second, "Run reading arrivals again", func() bool {
		c := l.js.arrivals()
		return c != nil && len(c.consumes()) == 2 && l.reading.Load()
	})
	cancel()
	<-done
	if cc := l.js.arrivals().consumes(); cc[1].stops() != 1 {
		t.Fatalf("the second read stopped %d times after Run returned, want 1", cc[1].stops())
	}
}

// TestLaneRunFinishesATake: a take under way when ctx is cancelled runs to its
// end, and Run returns after it.
func TestLaneRunFinishesATake(t *testing.T) {
	l := newTestLane(t, 5000)
	block, entered := make(chan struct{}), make(chan struct{})
	l.cfg.Decider = &blockingOwners{fakeOwners: l.owners, entered: entered, block: block}
	l.stream.store("jobs.b", 1001, "b")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	l.work <- arrival{id: "JOBS:1001", tenant: "b", subject: "jobs.b", seq: 1001, cost: 1, at: l.clock.Now()}
	<-entered // deciding
	cancel()
	close(block)
	<-done
	if l.stream.has(1001) || len(l.js.copies()) != 1 {
		t.Fatalf("the take stopped with ctx: original kept %v, %d copies", l.stream.has(1001), len(l.js.copies()))
	}
}

// blockingOwners blocks DecideBatch until block is closed.
type blockingOwners struct {
	*fakeOwners
	entered chan struct{}
	block   chan struct{}
}

func (o *blockingOwners) DecideBatch(ctx context.Context, copies []throttle.Copy) []throttle.Result {
	close(o.entered)
	<-o.block
	return o.fakeOwners.DecideBatch(ctx, copies)
}

package streams_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/streams"
)

// setup starts a NATS server of the test's own and returns a JetStream
// context on it.
func setup(t *testing.T) (context.Context, jetstream.JetStream) {
	t.Helper()
	nc := testenv.StartNATS(t, "").Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx, js
}

// TestEnsureStreamCreatesThenCompletes: a missing stream is created; run
// again with more subjects and schedules, the same stream binds them and
// allows schedules, keeping what it had.
func TestEnsureStreamCreatesThenCompletes(t *testing.T) {
	ctx, js := setup(t)
	s, err := streams.EnsureStream(ctx, js, streams.StreamSpec{Name: "JOBS", Subjects: []string{"jobs.a.>"}, AllowDirect: true})
	if err != nil {
		t.Fatal(err)
	}
	if c := s.CachedInfo().Config; !slices.Equal(c.Subjects, []string{"jobs.a.>"}) || !c.AllowDirect || c.AllowMsgSchedules {
		t.Fatalf("created %v, direct %v, schedules %v", c.Subjects, c.AllowDirect, c.AllowMsgSchedules)
	}
	s, err = streams.EnsureStream(ctx, js, streams.StreamSpec{Name: "JOBS", Subjects: []string{"jobs.a.x", "jobs.b.>"}, ScheduleSubjects: []string{"sched.>"}})
	if err != nil {
		t.Fatal(err)
	}
	c := s.CachedInfo().Config
	if want := []string{"jobs.a.>", "jobs.b.>", "sched.>"}; !slices.Equal(c.Subjects, want) {
		t.Errorf("subjects %v, want %v (jobs.a.x is covered already)", c.Subjects, want)
	}
	if !c.AllowMsgSchedules || !c.AllowDirect {
		t.Errorf("schedules %v, direct %v: want both", c.AllowMsgSchedules, c.AllowDirect)
	}
}

// TestEnsureCapturedCreatesOnceAndFindsExisting: with no stream storing
// the subject, the fallback is created; a stream that stores it already,
// whoever made it, is returned as it is.
func TestEnsureCapturedCreatesOnceAndFindsExisting(t *testing.T) {
	ctx, js := setup(t)
	spec := streams.CaptureSpec{Subject: "done.*", Fallback: "DONE", MaxAge: time.Hour}
	for range 2 {
		s, err := streams.EnsureCaptured(ctx, js, spec)
		if err != nil {
			t.Fatal(err)
		}
		if c := s.CachedInfo().Config; c.Name != "DONE" || c.Replicas != 1 || c.MaxAge != time.Hour {
			t.Fatalf("stream %s, replicas %d, max age %v", c.Name, c.Replicas, c.MaxAge)
		}
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "MINE", Subjects: []string{"dlq.>"}}); err != nil {
		t.Fatal(err)
	}
	s, err := streams.EnsureCaptured(ctx, js, streams.CaptureSpec{Subject: "dlq.*", Fallback: "DLQ"})
	if err != nil {
		t.Fatal(err)
	}
	if name := s.CachedInfo().Config.Name; name != "MINE" {
		t.Errorf("stream %s, want the existing MINE", name)
	}
}

// TestEnsureConsumerFilters: one job subject is a FilterSubject, several
// are FilterSubjects; every consumer redelivers without limit.
func TestEnsureConsumerFilters(t *testing.T) {
	ctx, js := setup(t)
	if _, err := streams.EnsureStream(ctx, js, streams.StreamSpec{Name: "JOBS", Subjects: []string{"a.>", "b.>"}}); err != nil {
		t.Fatal(err)
	}
	for _, filters := range [][]string{{"a.>"}, {"a.>", "b.>"}} {
		c, err := streams.EnsureConsumer(ctx, js, streams.ConsumerSpec{Stream: "JOBS", Name: "w", FilterSubjects: filters, MaxAckPending: 10, AckWait: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		cfg := c.CachedInfo().Config
		got := cfg.FilterSubjects
		if cfg.FilterSubject != "" {
			got = []string{cfg.FilterSubject}
		}
		if !slices.Equal(got, filters) || cfg.MaxDeliver != -1 || cfg.AckPolicy != jetstream.AckExplicitPolicy || cfg.AckWait != time.Minute {
			t.Errorf("filters %v: got %v, max deliver %d, ack %v, wait %v", filters, got, cfg.MaxDeliver, cfg.AckPolicy, cfg.AckWait)
		}
	}
}

// TestUnbounded: only a limits stream with no limit keeps every message.
func TestUnbounded(t *testing.T) {
	for _, tc := range []struct {
		cfg  jetstream.StreamConfig
		want bool
	}{
		{jetstream.StreamConfig{Retention: jetstream.LimitsPolicy}, true},
		{jetstream.StreamConfig{Retention: jetstream.LimitsPolicy, MaxAge: time.Hour}, false},
		{jetstream.StreamConfig{Retention: jetstream.LimitsPolicy, MaxBytes: 1 << 20}, false},
		{jetstream.StreamConfig{Retention: jetstream.LimitsPolicy, MaxMsgs: 10}, false},
		{jetstream.StreamConfig{Retention: jetstream.LimitsPolicy, MaxMsgsPerSubject: 1}, false},
		{jetstream.StreamConfig{Retention: jetstream.WorkQueuePolicy}, false},
		{jetstream.StreamConfig{Retention: jetstream.InterestPolicy}, false},
	} {
		if got := streams.Unbounded(tc.cfg); got != tc.want {
			t.Errorf("Unbounded(%+v) = %v, want %v", tc.cfg, got, tc.want)
		}
	}
}

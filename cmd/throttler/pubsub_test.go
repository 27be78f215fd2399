package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/testenv"
)

// jobsStream creates the stream JOBS of jobs.> on s's NATS server, as a
// worker would before pub can store jobs.
func jobsStream(ctx context.Context, t *testing.T, s servers) jetstream.Stream {
	t.Helper()
	js, err := jetstream.New(s.nats.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.>"}})
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// TestPubStoresJobs publishes jobs with a header and numbered data: none
// before a stream binds the subject (exit 1, saying to start the worker),
// then each stored with its header and number.
func TestPubStoresJobs(t *testing.T) {
	s := setup(t)
	cli(t, "pub", "jobs.acme.x", "hi").want(t, "pub with no stream", exitFailed, nil, []string{"no stream stores jobs.acme.x: start the worker first"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream := jobsStream(ctx, t, s)
	cli(t, "pub", "-H", "Job-Cost: 2", "-n", "3", "jobs.acme.x", "job {n}").want(t, "pub -n 3", exitOK,
		[]string{"published 3 job(s) to jobs.acme.x, stored in stream JOBS: first id JOBS:1, last JOBS:3"}, nil)
	m, err := stream.GetMsg(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != "job 2" || m.Header.Get("Job-Cost") != "2" {
		t.Fatalf("second job: data %q, headers %v; want \"job 2\" and Job-Cost 2", m.Data, m.Header)
	}
	cli(t, "pub", "-H", "nocolon", "jobs.acme.x").want(t, "pub with a bad header", exitConfig, nil, []string{"want Name:Value"})
	// One Nats-Msg-Id for every job: the stream keeps the first, and pub
	// says the others were not stored.
	cli(t, "pub", "-H", "Nats-Msg-Id: same", "-n", "2", "jobs.acme.x", "hi").want(t, "pub -n 2 with one id", exitOK,
		[]string{"published 2 job(s) to jobs.acme.x, stored in stream JOBS: first id JOBS:4, last JOBS:4",
			"1 of them had the Nats-Msg-Id of a job before them and were not stored again: 1 stored"}, nil)
}

// TestPubSummarySaysWhenOtherMessagesLieBetween: jobs whose sequences
// follow each other are a range; when other messages (moved copies) were
// stored between them, the summary says so.
func TestPubSummarySaysWhenOtherMessagesLieBetween(t *testing.T) {
	first, last := &jetstream.PubAck{Stream: "JOBS", Sequence: 4}, &jetstream.PubAck{Stream: "JOBS", Sequence: 41}
	got := pubSummary(20, "jobs.acme.x", first, last, 20)
	if want := "published 20 job(s) to jobs.acme.x, stored in stream JOBS: first id JOBS:4, last JOBS:41 (the ids between include other messages of the stream)"; got != want {
		t.Errorf("20 jobs over 38 sequences:\n got %q\nwant %q", got, want)
	}
	last.Sequence = 23
	if got := pubSummary(20, "jobs.acme.x", first, last, 20); strings.Contains(got, "other messages") {
		t.Errorf("20 jobs over 20 sequences: %q", got)
	}
}

// TestPubRetriesThroughARestart: NATS restarts while pub stores jobs; pub
// retries the publishes that failed meanwhile and exits 0, and every job
// is stored once (its Nats-Msg-Id makes a retry of a job stored in fact a
// duplicate the stream drops).
func TestPubRetriesThroughARestart(t *testing.T) {
	s := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream := jobsStream(ctx, t, s)
	const n = 20000
	done := make(chan result, 1)
	go func() {
		var out, errw testenv.Buffer
		code := run([]string{"pub", "-n", strconv.Itoa(n), "jobs.acme.x", "job {n}"}, &out, &errw)
		done <- result{code: code, stdout: out.String(), stderr: errw.String()}
	}()
	stored := func() uint64 {
		info, err := stream.Info(ctx)
		if err != nil {
			return 0
		}
		return info.State.Msgs
	}
	testenv.Eventually(t, 30*time.Second, "pub under way", func() bool { return stored() >= 500 })
	select {
	case r := <-done:
		t.Fatalf("pub ended before the restart: %+v", r)
	default:
	}
	s.nats.Restart(t)
	r := <-done
	r.want(t, "pub through a restart", exitOK, []string{fmt.Sprintf("published %d job(s)", n)}, nil)
	if got := stored(); got != n {
		t.Fatalf("the stream holds %d jobs, want each of the %d once", got, n)
	}
}

// TestSubPrintsWhatComesOut listens on the default subjects, the forward
// and dead-letter ones, and prints each message with its headers.
func TestSubPrintsWhatComesOut(t *testing.T) {
	s := setup(t)
	var out, errw testenv.Buffer
	done := make(chan int, 1)
	go func() { done <- run([]string{"sub", "-n", "2"}, &out, &errw) }()
	testenv.Eventually(t, 10*time.Second, "sub listening", func() bool {
		return strings.Contains(errw.String(), "listening on done.*, dlq.*")
	})
	nc := s.nats.Connect(t)
	if err := nc.Publish("done.acme", []byte("job 1")); err != nil {
		t.Fatal(err)
	}
	dead := &nats.Msg{Subject: "dlq.acme", Data: []byte("job 2"), Header: nats.Header{"Throttler-Reason": []string{"cost exceeds burst"}}}
	if err := nc.PublishMsg(dead); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("sub exit %d:\n%s", code, errw.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("sub -n 2 did not end after two messages; printed:\n%s", out.String())
	}
	for _, want := range []string{` done.acme data="job 1"`, ` dlq.acme Throttler-Reason="cost exceeds burst" data="job 2"`} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("sub printed:\n%s\nwant a line with %q", out.String(), want)
		}
	}
}

// TestPubSubHelp checks that -h prints the usage and the flags, exit 0.
func TestPubSubHelp(t *testing.T) {
	cli(t, "pub", "-h").want(t, "pub -h", exitOK, nil, []string{"usage: throttler pub", "-n int"})
	cli(t, "sub", "-h").want(t, "sub -h", exitOK, nil, []string{"usage: throttler sub", "exit after this many messages"})
}

// TestPubRefusesBadInput: a subject that is not one subject, a bad -n or
// a bad header exit 2 at once with a message, prefixed as every other
// and naming what is wrong, before any connection (NATS_URL points
// nowhere: a connection would fail with 1). Before, `pub jobs..x` waited
// 10 s for an answer, `pub 'jobs.ta.>'` stored a job under the wildcard,
// -n 0 printed the usage alone, and -H's error came without the prefix.
func TestPubRefusesBadInput(t *testing.T) {
	t.Setenv("NATS_URL", "nats://127.0.0.1:1")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pub", "jobs..x", "hi"}, `throttler pub: subject "jobs..x" has an empty token`},
		{[]string{"pub", "jobs.ta.>", "hi"}, `throttler pub: subject "jobs.ta.>" has a wildcard`},
		{[]string{"pub", "jobs.*.x"}, `throttler pub: subject "jobs.*.x" has a wildcard`},
		{[]string{"pub", "jobs.a b"}, `throttler pub: subject "jobs.a b" contains white space`},
		{[]string{"pub", "jobs.acme."}, `has an empty token`},
		{[]string{"pub", "-n", "0", "jobs.acme.x"}, "throttler pub: -n must be at least 1, got 0"},
		{[]string{"pub", "-H", "nocolon", "jobs.acme.x"}, `throttler pub: invalid value "nocolon" for flag -H: want Name:Value`},
		{[]string{"pub", "--bogus", "jobs.acme.x"}, "throttler pub: flag provided but not defined: -bogus"},
		{[]string{"pub"}, "throttler pub: want a SUBJECT"},
		{[]string{"pub", "jobs.acme.x", "hi", "extra"}, `throttler pub: unexpected "extra"`},
		{[]string{"sub", "-n", "x"}, `throttler sub: invalid value "x" for flag -n`},
		{[]string{"sub", "done.>", "done..x"}, `throttler sub: subject "done..x" has an empty token`},
		{[]string{"sub", "-n", "-1"}, "throttler sub: -n must be 0 (run until interrupted) or more, got -1"},
		{[]string{"pub", "-H", "Na me:v", "jobs.acme.x"}, `throttler pub: invalid value "Na me:v" for flag -H: header name "Na me"`},
	} {
		start := time.Now()
		r := cli(t, c.args...)
		r.want(t, strings.Join(c.args, " "), exitConfig, nil, []string{c.want, "usage: throttler"})
		// pub's retries for an answer last 10 s: a refusal made before
		// connecting comes well within 5.
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s took %s to refuse", strings.Join(c.args, " "), d)
		}
	}
}

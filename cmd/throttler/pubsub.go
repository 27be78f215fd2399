package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/config"
	"github.com/throttler/throttler/internal/app"
	"github.com/throttler/throttler/subject"
)

// pubUsage and subUsage are the usage of `throttler pub` and `throttler sub`.
const (
	pubUsage = "usage: throttler pub [-H Name:Value]... [-n N] SUBJECT [DATA]   ({n} in DATA is the job's number, from 1)"
	subUsage = "usage: throttler sub [-n N] [SUBJECT...]   (default: the forward and dead-letter subjects, done.* and dlq.*)"
)

// headerFlags collects repeated -H Name:Value flags.
type headerFlags nats.Header

// String implements flag.Value.
func (h headerFlags) String() string { return fmt.Sprint(nats.Header(h)) }

// Set implements flag.Value.
func (h headerFlags) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return fmt.Errorf("want Name:Value, got %q", v)
	}
	if !config.HeaderNameOK(strings.TrimSpace(name)) {
		return fmt.Errorf("header name %q: want letters, digits and !#$%%&'*+-.^_`|~ only", strings.TrimSpace(name))
	}
	nats.Header(h).Add(strings.TrimSpace(name), strings.TrimSpace(value))
	return nil
}

// pubCmd runs `throttler pub ARGS`: it stores jobs in the jobs stream, as
// a producer would, each with JetStream's acknowledgement.
func pubCmd(args []string, quiet bool, stdout, stderr io.Writer) int {
	fail := func(status int, format string, a ...any) int {
		fmt.Fprintf(stderr, "throttler pub: "+format+"\n", a...)
		return status
	}
	fs := flag.NewFlagSet("throttler pub", flag.ContinueOnError)
	hdr := headerFlags{}
	fs.Var(hdr, "H", "a header of every job, Name:Value (repeat for more)")
	n := fs.Int("n", 1, "how many jobs to publish")
	if status, ok := parseFlags(fs, args, pubUsage, stderr); !ok {
		return status
	}
	switch {
	case fs.NArg() < 1:
		return fail(exitConfig, "want a SUBJECT\n%s", pubUsage)
	case fs.NArg() > 2:
		return fail(exitConfig, "unexpected %q after SUBJECT and DATA\n%s", strings.Join(fs.Args()[2:], " "), pubUsage)
	case *n < 1:
		return fail(exitConfig, "-n must be at least 1, got %d\n%s", *n, pubUsage)
	}
	subj, data := fs.Arg(0), fs.Arg(1)
	// A job is stored under one subject: a pattern, or a subject NATS
	// would refuse, is said at once, not after pub's retries for an
	// answer that never comes (jobs..x) or stored under its wildcard
	// (jobs.acme.>).
	if err := subject.Validate(subj, false); err != nil {
		return fail(exitConfig, "%v: a job goes to one subject, not a pattern, with no empty token or white space\n%s", err, pubUsage)
	}
	cfg, ok := loadConfig(stderr)
	if !ok {
		return exitConfig
	}
	announce(stderr, quiet, cfg.Config, uses{nats: true})
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout+pubRetryFor+time.Duration(*n)*time.Millisecond)
	defer cancel()
	nc, js, err := connectJetStream(cfg, "pub")
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	defer nc.Close()
	var first, last *jetstream.PubAck
	seqs := map[uint64]bool{}                             // the messages this run's jobs are stored as
	run := strings.TrimPrefix(nats.NewInbox(), "_INBOX.") // this run's jobs' ids
	for i := 1; i <= *n; i++ {
		msg := &nats.Msg{Subject: subj, Data: []byte(strings.ReplaceAll(data, "{n}", strconv.Itoa(i))), Header: nats.Header{}}
		for k, vs := range hdr {
			msg.Header[k] = slices.Clone(vs)
		}
		if msg.Header.Get(jetstream.MsgIDHeader) == "" {
			msg.Header.Set(jetstream.MsgIDHeader, "pub-"+run+"-"+strconv.Itoa(i))
		}
		ack, err := publishRetried(ctx, js, msg)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return fail(exitFailed, "no stream stores %s: start the worker first (it creates the stream %s for %s), or publish to a subject it binds",
				subj, cfg.Stream, strings.Join(cfg.Subjects, ","))
		}
		if errors.Is(err, jetstream.ErrNoStreamResponse) {
			return fail(exitFailed, "publishing job %d of %d to %s: no server answered for the stream that stores it, for %s (a leader election, or its servers down); the jobs before it are stored",
				i, *n, subj, pubRetryFor)
		}
		if err != nil {
			return fail(exitFailed, "publishing job %d of %d to %s: %v", i, *n, subj, err)
		}
		if first == nil {
			first = ack
		}
		last = ack
		seqs[ack.Sequence] = true
	}
	fmt.Fprintln(stdout, pubSummary(*n, subj, first, last, len(seqs)))
	if same := *n - len(seqs); same > 0 {
		// A Nats-Msg-Id given with -H names every job: the stream keeps
		// the first within its duplicate window.
		fmt.Fprintf(stdout, "%d of them had the Nats-Msg-Id of a job before them and were not stored again: %d stored\n", same, len(seqs))
	}
	return exitOK
}

// pubSummary says where n jobs published to subj were stored: the ids of
// the first and the last (STREAM:SEQ), and whether the ids between them
// include other messages (stored of them, by their sequences, were
// stored): the worker stores moved jobs in the same stream, so the
// sequences of jobs published together need not follow each other.
func pubSummary(n int, subj string, first, last *jetstream.PubAck, stored int) string {
	between := ""
	if last.Sequence-first.Sequence+1 > uint64(stored) {
		between = " (the ids between include other messages of the stream)"
	}
	return fmt.Sprintf("published %d job(s) to %s, stored in stream %s: first id %s:%d, last %s:%d%s", n, subj, first.Stream,
		first.Stream, first.Sequence, last.Stream, last.Sequence, between)
}

// pubRetryFor is how long pub retries a job whose publish failed for want
// of an answer: a cluster electing a stream leader answers again within
// seconds.
const pubRetryFor = 10 * time.Second

// publishRetried stores msg, retrying a publish that found no server
// answering or had no acknowledgement for up to pubRetryFor, as the docs
// ask of every publisher: msg's Nats-Msg-Id stores it once however often
// it is sent. A refusal by JetStream (a 4xx API error) is not retried,
// nor a subject no stream binds (jetstream.ErrStreamNotFound): a publish
// nothing answers is told apart from one whose stream is electing its
// leader by asking which stream binds the subject.
func publishRetried(ctx context.Context, js jetstream.JetStream, msg *nats.Msg) (*jetstream.PubAck, error) {
	bo := backoff.WithContext(backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond),
		backoff.WithMaxInterval(time.Second), backoff.WithMaxElapsedTime(pubRetryFor)), ctx)
	return backoff.RetryWithData(func() (*jetstream.PubAck, error) {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		ack, err := js.PublishMsg(actx, msg)
		var apiErr *jetstream.APIError
		switch {
		case errors.As(err, &apiErr) && apiErr.Code >= 400 && apiErr.Code < 500:
			return nil, backoff.Permanent(err)
		case errors.Is(err, jetstream.ErrNoStreamResponse):
			if _, serr := js.StreamNameBySubject(actx, msg.Subject); errors.Is(serr, jetstream.ErrStreamNotFound) {
				return nil, backoff.Permanent(serr)
			}
		}
		return ack, err
	}, bo)
}

// subCmd runs `throttler sub ARGS`: it prints each message arriving on the
// subjects, live (core NATS: what arrived before it started is not shown),
// until SIGINT or SIGTERM, or -n messages.
func subCmd(args []string, quiet bool, stdout, stderr io.Writer) int {
	fail := func(status int, format string, a ...any) int {
		fmt.Fprintf(stderr, "throttler sub: "+format+"\n", a...)
		return status
	}
	fs := flag.NewFlagSet("throttler sub", flag.ContinueOnError)
	n := fs.Int("n", 0, "exit after this many messages; 0: run until interrupted")
	if status, ok := parseFlags(fs, args, subUsage, stderr); !ok {
		return status
	}
	if *n < 0 {
		return fail(exitConfig, "-n must be 0 (run until interrupted) or more, got %d\n%s", *n, subUsage)
	}
	cfg, ok := loadConfig(stderr)
	if !ok {
		return exitConfig
	}
	subjects := fs.Args()
	for _, s := range subjects {
		// Refused here, not by the server after connecting.
		if err := subject.Validate(s, true); err != nil {
			return fail(exitConfig, "%v\n%s", err, subUsage)
		}
	}
	if len(subjects) == 0 {
		subjects = []string{cfg.Forward.Pattern(), cfg.DLQ.Pattern()}
	}
	announce(stderr, quiet, cfg.Config, uses{nats: true})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	nc, err := app.ConnectNATS(cfg.Config, "throttler-sub", nats.Timeout(cliTimeout))
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	defer nc.Close()
	msgs := make(chan *nats.Msg, 1024)
	for _, s := range subjects {
		if _, err := nc.ChanSubscribe(s, msgs); err != nil {
			return fail(exitConfig, "subscribing to %s: %v", s, err)
		}
	}
	if err := nc.FlushTimeout(cliTimeout); err != nil {
		return fail(exitFailed, "%v", err)
	}
	if !quiet {
		fmt.Fprintf(stderr, "throttler sub: listening on %s; Ctrl-C ends\n", strings.Join(subjects, ", "))
	}
	for seen := 0; *n == 0 || seen < *n; seen++ {
		select {
		case <-ctx.Done():
			return exitOK
		case m := <-msgs:
			printMsg(stdout, m)
		}
	}
	return exitOK
}

// parseFlags parses args into fs, whose name starts its messages (as
// "throttler pub"). ok is false when the command is to end with status:
// after -h, which prints usage and the flags (0), or a flag that does not
// parse, said with the command's prefix before the same (2). The flag
// package would print that error itself, without the prefix.
func parseFlags(fs *flag.FlagSet, args []string, usage string, stderr io.Writer) (status int, ok bool) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	if err == nil {
		return exitOK, true
	}
	status = exitOK
	if !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		status = exitConfig
	}
	fmt.Fprintln(stderr, usage)
	fs.SetOutput(stderr)
	fs.PrintDefaults()
	return status, false
}

// maxShown bounds the bytes of a message's data sub prints.
const maxShown = 200

// printMsg writes one line for m: the time, the subject, the headers
// sorted by name, and the data, quoted and cut to maxShown bytes.
func printMsg(w io.Writer, m *nats.Msg) {
	names := make([]string, 0, len(m.Header))
	for k := range m.Header {
		names = append(names, k)
	}
	slices.Sort(names)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", time.Now().Format("15:04:05.000"), m.Subject)
	for _, k := range names {
		fmt.Fprintf(&b, " %s=%q", k, strings.Join(m.Header[k], ","))
	}
	data := m.Data
	cut := ""
	if len(data) > maxShown {
		data, cut = data[:maxShown], fmt.Sprintf("… (%d bytes)", len(m.Data))
	}
	fmt.Fprintf(&b, " data=%q%s\n", data, cut)
	_, _ = io.WriteString(w, b.String())
}

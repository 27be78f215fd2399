package ops

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// stored is one message a scan read from a stream.
type stored struct {
	Seq     uint64
	Subject string
	Header  nats.Header
	// Data is nil when the scan read headers only.
	Data []byte
	// Size is the size of the message's data.
	Size int
	// Time is when the stream stored it.
	Time time.Time
}

// scanOptions says which messages a scan reads.
type scanOptions struct {
	// Filters are the subjects read; at least one.
	Filters []string
	// From is the first sequence read; 0 for the first.
	From uint64
	// Since, when set, starts at the first message stored at or after it
	// (From is then ignored).
	Since time.Time
	// HeadersOnly reads no data: far cheaper for listings.
	HeadersOnly bool
}

// ScanConsumerPrefix starts the name of every consumer a scan reads
// through. Such a consumer lingers a few seconds after an operator's
// command and reads nothing a worker acts on, so the workers pass over it
// where another reader of the job subjects would turn their fast lane off
// (the lane deletes the jobs it copies, which another reader would miss).
const ScanConsumerPrefix = "throttler-scan-"

// scanBatch is how many messages a scan asks for at a time.
const scanBatch = 500

// scan calls fn with each message on opts.Filters, in stream order, until
// fn returns false or the messages stored when the scan began are read.
// It reads through an ordered consumer of its own, which the server drops
// a few seconds after the scan: the workers' consumers are not touched.
func scan(ctx context.Context, s jetstream.Stream, opts scanOptions, fn func(stored) (bool, error)) error {
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream info: %w", err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 || opts.From > last {
		return nil
	}
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects:    opts.Filters,
		HeadersOnly:       opts.HeadersOnly,
		InactiveThreshold: 10 * time.Second,
		// Unique to the scan (the client numbers the consumers it makes
		// after it), and known to the workers.
		NamePrefix: ScanConsumerPrefix + rand.Text(),
	}
	switch {
	case !opts.Since.IsZero():
		cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
		since := opts.Since
		cfg.OptStartTime = &since
	case opts.From > 1:
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = opts.From
	}
	c, err := s.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("reading the stream: %w", err)
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch, err := c.FetchNoWait(scanBatch)
		if err != nil {
			return fmt.Errorf("reading the stream: %w", err)
		}
		n := 0
		done := false
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("reading the stream: %w", err)
			}
			st := stored{Seq: meta.Sequence.Stream, Subject: m.Subject(), Header: m.Headers(), Time: meta.Timestamp}
			if opts.HeadersOnly {
				st.Size, _ = strconv.Atoi(m.Headers().Get(nats.MsgSize))
			} else {
				st.Data, st.Size = m.Data(), len(m.Data())
			}
			more, err := fn(st)
			if err != nil {
				return err
			}
			if !more || meta.NumPending == 0 || st.Seq >= last {
				done = true
				break
			}
		}
		if done {
			return nil
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
			return fmt.Errorf("reading the stream: %w", err)
		}
		if n == 0 {
			return nil
		}
	}
}

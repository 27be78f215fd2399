package fastlane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/fastlane/fastcopy"
	"github.com/throttler/throttler/subject"
)

// Claims settles originals delivered after a lane claimed their jobs for
// copies (consumer.ClaimSettler). It works without a running lane, so a
// worker whose lane is off still settles the jobs an earlier one claimed.
type Claims struct {
	cfg ClaimsConfig
}

// ClaimsConfig is what Claims needs.
type ClaimsConfig struct {
	// Stream is the jobs stream, where copies are stored. Required.
	Stream jetstream.Stream
	// Owners gives up the claims of copies never made. Required.
	Owners interface {
		Release(ctx context.Context, tenant, jobID string, incarnation int64) (bool, error)
	}
	// Subjects names the copies' subjects. Required.
	Subjects subject.Schedules
	// Deadline bounds one take of a lane (Config.Deadline), and one
	// settlement here. Defaults to 4s.
	Deadline time.Duration
	// Stats receives the count of originals acked as duplicates. Defaults
	// to counts of its own.
	Stats *consumer.Stats
	// Log receives logs. Defaults to slog.Default().
	Log *slog.Logger
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

// NewClaims returns Claims as cfg describes them, or an error naming what
// cfg is missing.
func NewClaims(cfg ClaimsConfig) (*Claims, error) {
	if err := missing(required{"Stream", cfg.Stream == nil}, required{"Owners", cfg.Owners == nil},
		required{"Subjects", cfg.Subjects == ""}); err != nil {
		return nil, fmt.Errorf("fastlane: claims: %w", err)
	}
	setDefault(&cfg.Deadline, 4*time.Second)
	shared(&cfg.Stats, &cfg.Log, &cfg.Now)
	return &Claims{cfg: cfg}, nil
}

// recheck is how long an original whose copy is not stored yet waits
// before it is decided again.
const recheck = time.Second

// takeover is the age past which an original whose job a lane claimed,
// and whose copy is not stored, is taken back: the lane that claimed it
// has stopped (a take starts within Deadline of the job's arrival and ends
// within Deadline of its start), so the claim is given up and the original
// runs instead of waiting for the claim to expire. The margin covers
// clocks: the job's age is read from the time the server stored it.
func (c *Claims) takeover() time.Duration { return 3*c.cfg.Deadline + 5*time.Second }

// SettleClaimed settles msg, an original whose job a lane claimed for its
// copy: acked as a duplicate once the copy is stored, handed back for
// recheck until then (the copy is being made). An original older than
// takeover whose copy is not stored was claimed by a lane that stopped
// before copying it: the claim is given up and the job handed back to run.
func (c *Claims) SettleClaimed(ctx context.Context, msg jetstream.Msg, job consumer.Job) {
	cctx, cancel := context.WithTimeout(ctx, c.cfg.Deadline)
	defer cancel()
	seq := job.OriginalSequence()
	stored, err := copyStored(cctx, c.cfg.Stream, c.cfg.Subjects, job.Tenant, seq)
	switch {
	case err != nil:
		c.cfg.Log.Warn("fast lane: looking for a job's copy failed; handing the job back", "tenant", job.Tenant, "job", job.ID, "err", err)
	case stored:
		c.cfg.Stats.Add(job.Tenant, func(s *consumer.TenantStats) { s.Duplicates++ })
		c.settle(msg, job, msg.Ack)
		return
	case c.cfg.Now().Sub(job.Published) > c.takeover():
		released, rerr := c.cfg.Owners.Release(cctx, job.Tenant, job.ID, fastcopy.Incarnation(seq))
		if rerr == nil {
			c.cfg.Log.Warn("fast lane: a job claimed for a copy never made; running it", "tenant", job.Tenant, "job", job.ID, "released", released)
			c.settle(msg, job, msg.Nak)
			return
		}
		c.cfg.Log.Warn("fast lane: giving up a stale claim failed; handing the job back", "tenant", job.Tenant, "job", job.ID, "err", rerr)
	}
	c.settle(msg, job, func() error { return msg.NakWithDelay(recheck) })
}

// settle settles msg with f; a failure leaves it to JetStream's redelivery
// after AckWait.
func (c *Claims) settle(msg jetstream.Msg, job consumer.Job, f func() error) {
	if err := f(); err != nil {
		c.cfg.Log.Warn("settling a claimed job failed; JetStream redelivers it after AckWait", "tenant", job.Tenant, "job", job.ID, "subject", msg.Subject(), "err", err)
	}
}

// copyStored reports whether the copy of the tenant's job stored at seq is
// in the stream.
func copyStored(ctx context.Context, stream jetstream.Stream, subjects subject.Schedules, tenant string, seq uint64) (bool, error) {
	_, err := stream.GetLastMsgForSubject(ctx, subjects.Fast(tenant, seq))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return false, nil
	}
	return false, err
}

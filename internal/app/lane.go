package app

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/fastlane"
	"github.com/throttler/throttler/internal/ops"
	"github.com/throttler/throttler/subject"
)

// laneAvailable reports whether the fast lane can run on the jobs stream.
// The lane deletes the originals it copies, so a stream that denies
// deletes has none, nor does a stream another consumer reads jobs from.
// It reads arrivals through a second consumer of the job subjects, which a
// work-queue stream refuses.
func laneAvailable(ctx context.Context, stream jetstream.Stream, cfg *Settings, log *slog.Logger) bool {
	sc := stream.CachedInfo().Config
	const off = "fast lane off: a tenant's jobs stored behind another tenant's backlog wait for it"
	switch {
	case sc.DenyDelete:
		log.Warn(off, "stream", cfg.Stream, "why", "the jobs stream denies deletes, and the lane deletes the jobs it copies")
		return false
	case sc.Retention == jetstream.WorkQueuePolicy:
		log.Warn(off, "stream", cfg.Stream, "why", "a work-queue stream allows one consumer of the job subjects, and the lane reads arrivals through a second")
		return false
	}
	if other, err := otherJobsConsumer(ctx, stream, cfg); err != nil || other != "" {
		log.Warn(off, "stream", cfg.Stream, "why", "the jobs stream has a consumer of the job subjects besides the workers', and the lane deletes the jobs it copies",
			"consumer", other, "err", err)
		return false
	}
	return true
}

// otherJobsConsumer returns the name of a consumer of the jobs stream,
// not one of the workers', that may deliver job subjects, or "" when there
// is none. Such a consumer would never see the jobs the fast lane takes,
// whose originals it deletes.
func otherJobsConsumer(ctx context.Context, stream jetstream.Stream, cfg *Settings) (string, error) {
	ours := []string{cfg.Consumer, bundlesConsumer(cfg), copiesConsumer(cfg), arrivalsConsumer(cfg), wokenConsumer(cfg)}
	list := stream.ListConsumers(ctx)
	other := ""
	// Read to the end: the lister's goroutine blocks until every consumer
	// is taken.
	for info := range list.Info() {
		if other != "" || slices.Contains(ours, info.Name) || strings.HasPrefix(info.Name, ops.ScanConsumerPrefix) {
			continue // an operator's command reading the stream: gone in seconds
		}
		filters := info.Config.FilterSubjects
		if info.Config.FilterSubject != "" {
			filters = append(filters, info.Config.FilterSubject)
		}
		if len(filters) == 0 {
			other = info.Name // it delivers every subject
		}
		for _, f := range filters {
			for _, j := range cfg.Subjects {
				if subject.Overlap(f, j) {
					other = info.Name
				}
			}
		}
	}
	if err := list.Err(); err != nil {
		return "", fmt.Errorf("listing the consumers of stream %s: %w", cfg.Stream, err)
	}
	return other, nil
}

// lane builds the fast lane, when it runs, and the settler of the jobs a
// lane claimed, whenever moved jobs may come back (a lane of an earlier
// worker may have claimed some).
func (st *jobStreams) lane(js jetstream.JetStream, cfg *Settings, e *engine, capped func(tenant string) bool,
	stats *consumer.Stats, log *slog.Logger) (consumer.Lane, consumer.ClaimSettler, error) {
	if !st.path.movesBack {
		return nil, nil, nil
	}
	deadline := laneDeadline(cfg)
	claims, err := fastlane.NewClaims(fastlane.ClaimsConfig{Stream: st.stream, Owners: e.owners, Subjects: cfg.Schedules,
		Deadline: deadline, Stats: stats, Log: log})
	if err != nil || st.copies == nil {
		return nil, claims, err
	}
	moveRate := cfg.LaneMoveRate
	if moveRate == 0 {
		moveRate = -1 // THROTTLER_LANE_MOVE_RATE=0: no cap
	}
	l, err := fastlane.New(fastlane.Config{
		JetStream:     js,
		Stream:        st.stream,
		Jobs:          st.jobs,
		Copies:        st.copies,
		Arrivals:      arrivalsConsumer(cfg),
		JobSubjects:   cfg.Subjects,
		Subjects:      cfg.Schedules,
		Tenant:        cfg.TenantFrom,
		Group:         cfg.GroupFrom,
		GroupRequired: cfg.GroupRequired,
		CostHeader:    cfg.CostHeader,
		Decider:       e.laneDecider,
		Owners:        e.owners,
		Capped:        capped,
		OtherReaders: func(ctx context.Context) (string, error) {
			return otherJobsConsumer(ctx, st.stream, cfg)
		},
		Stats:       stats,
		Log:         log,
		Backlog:     4 * WorkerConfig(cfg, log).FetchBatch,
		TenantShare: max(1, cfg.MaxAckPending/40),
		MoveRate:    moveRate,
		Deadline:    deadline,
	})
	if err != nil {
		return nil, nil, err
	}
	return l, claims, nil
}

// laneDeadline bounds one take of the fast lane: its Redis calls and its
// NATS requests.
func laneDeadline(cfg *Settings) time.Duration { return cfg.RedisTimeout + 2*time.Second }

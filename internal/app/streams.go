package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/config"
	"github.com/throttler/throttler/streams"
)

// jobStreams is what setUp made ready on the NATS server.
type jobStreams struct {
	// path is the deferral chosen for this server and stream.
	path deferPath
	// stream is the jobs stream.
	stream jetstream.Stream
	// jobs is the workers' durable consumer of the job subjects.
	jobs jetstream.Consumer
	// bundles unpacks fired bundles of moved jobs; nil when no moved job
	// can come back.
	bundles jetstream.Consumer
	// copies delivers the fast lane's copies; nil when the lane is off.
	copies jetstream.Consumer
	// woken delivers jobs woken under running caps; nil when the worker
	// cannot move jobs (nothing is parked to wake).
	woken jetstream.Consumer
	// recreate sets the stream and the consumers up again as chosen, for
	// a worker that finds them deleted.
	recreate func(context.Context) error
}

// nakAgeWarning is the jobs stream's max age under which a worker that
// defers with NAK only warns that jobs deferred past it are lost.
const nakAgeWarning = 24 * time.Hour

// errNotConnected is setUp's error while NATS is unreachable; the NATS
// watch (NATSWatch) says why, so the retries do not.
var errNotConnected = errors.New("not connected to NATS")

// recreateTimeout bounds the first look at the jobs stream when a worker
// sets the stream and consumers up again during a run: a server that is up
// answers in milliseconds.
const recreateTimeout = 2 * time.Second

// streamRecreateDelay is how long a worker waits before it creates again a
// jobs stream it found deleted.
const streamRecreateDelay = 2 * time.Second

// setUp creates or checks the jobs stream, the output streams and the
// consumers, and chooses the deferral path and whether the fast lane runs.
// Each setting the stream needs is made once, here: the job subjects bound
// and, to move jobs, the schedule subjects bound with message schedules on.
func setUp(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, cfg *Settings, log *slog.Logger) (*jobStreams, error) {
	if !nc.IsConnected() {
		return nil, errNotConnected
	}
	path, spec, err := choosePath(ctx, nc, js, cfg, log)
	if err != nil {
		return nil, err
	}
	stream, err := streams.EnsureStream(ctx, js, spec)
	if err != nil && unplaced(err) {
		// Not the schedules' fault: retried, the same stream is created
		// once the cluster can place it.
		return nil, fmt.Errorf("JetStream cannot place the jobs stream %s's replicas now (a cluster still forming, or a server down): %w", cfg.Stream, err)
	}
	if err != nil {
		err = replicasIsConfig(err, spec.Replicas)
		// Subjects that overlap another stream's (another fleet's schedule
		// prefix, say) are a setting to change, whatever THROTTLER_DEFER:
		// falling back to NAK would quietly give up fairness.
		err = overlapIsConfig(err, cfg, len(spec.ScheduleSubjects) > 0)
		if len(spec.ScheduleSubjects) == 0 || path.mode == config.DeferSchedule || errors.Is(err, ErrUnsupported) {
			return nil, refusedIsConfig(err, "the jobs stream "+cfg.Stream, "THROTTLER_STREAM and THROTTLER_SUBJECTS")
		}
		log.Warn("cannot enable message schedules on the jobs stream; deferring with NAK only", "err", err)
		path.mode = config.DeferNak
		spec.ScheduleSubjects = nil
		if stream, err = streams.EnsureStream(ctx, js, spec); err != nil {
			return nil, refusedIsConfig(overlapIsConfig(err, cfg, false), "the jobs stream "+cfg.Stream, "THROTTLER_STREAM and THROTTLER_SUBJECTS")
		}
	}
	// Moved jobs come back on every path: a worker that NAKs only may share
	// the stream with jobs an earlier worker moved (before THROTTLER_DEFER
	// was set to nak), whose copies must still run once and whose bundles
	// must still be unpacked when they fire.
	path.movesBack = path.mode != config.DeferNak || holdsMovedJobs(stream, cfg)
	path.maxAge = stream.CachedInfo().Config.MaxAge
	warnUnbounded(stream, "it holds the jobs", "THROTTLER_STREAM_MAX_AGE", cfg.StreamMaxAge, log)
	warnOneCopy(stream, nc.ConnectedClusterName(), log)
	warnReplicasUnapplied(stream, cfg.StreamReplicas, log)
	// A NAK'd job stays the same message, so it ages while it waits; a
	// max age of a day or more (the default is 7 days) leaves room for any
	// usual backlog and is not worth a warning at every start.
	if path.maxAge > 0 && path.maxAge < nakAgeWarning && path.mode == config.DeferNak {
		log.Warn("the jobs stream drops messages older than its max age, and a job deferred with NAK stays the same message: a job deferred past it is lost; raise the max age, or defer with auto or schedule, which move such jobs",
			"stream", cfg.Stream, "max_age", path.maxAge)
	}
	path.warnLongWindows(cfg.Rules, log)
	if path.mode == config.DeferNak && path.movesBack {
		log.Info("the jobs stream keeps moved jobs; unpacking their bundles as they fire", "subjects", cfg.Schedules.All())
	}
	lane := path.mode != config.DeferNak && cfg.FastLane != config.FastLaneOff && laneAvailable(ctx, stream, cfg, log)

	if err := captureOutputs(ctx, js, cfg, stream.CachedInfo().Config.Replicas, log); err != nil {
		return nil, err
	}
	wakes := path.mode != config.DeferNak
	specs := consumerSpecs(cfg, path.movesBack, lane, wakes)
	handles := make([]jetstream.Consumer, len(specs))
	for i, c := range specs {
		if handles[i], err = streams.EnsureConsumer(ctx, js, c); err != nil {
			return nil, refusedIsConfig(consumerIsConfig(err, c.Name), "the consumer "+c.Name, "THROTTLER_CONSUMER")
		}
	}
	st := &jobStreams{path: path, stream: stream, jobs: handles[0]}
	if path.movesBack {
		st.bundles = handles[1]
	}
	if lane {
		st.copies = handles[1+b2i(path.movesBack)]
	}
	if wakes {
		st.woken = handles[len(handles)-1]
	}
	st.recreate = func(ctx context.Context) error { return recreate(ctx, js, cfg, spec, specs, log) }
	return st, nil
}

// choosePath chooses how jobs are deferred on this server and stream, and
// what the jobs stream must then bind.
func choosePath(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, cfg *Settings, log *slog.Logger) (deferPath, streams.StreamSpec, error) {
	version := nc.ConnectedServerVersion()
	path := deferPath{mode: cfg.Defer, termWithReason: serverAtLeast(version, 2, 10)}
	spec := streams.StreamSpec{Name: cfg.Stream, Subjects: cfg.Subjects, MaxAge: cfg.StreamMaxAge, Replicas: cfg.StreamReplicas}
	if path.mode == config.DeferNak {
		return path, spec, nil
	}
	if !serverAtLeast(version, 2, 12) {
		if path.mode == config.DeferSchedule {
			return path, spec, fmt.Errorf("THROTTLER_DEFER=schedule needs nats-server 2.12 or later for message schedules; this server is %s: %w", version, ErrUnsupported)
		}
		log.Warn("nats-server has no message schedules; deferring with NAK only: deferred jobs hold MaxAckPending slots while they wait",
			"server", version, "needs", "2.12")
		path.mode = config.DeferNak
		return path, spec, nil
	}
	// A stream with interest retention drops at once a message no
	// consumer wants: a moved job's copy, which no consumer reads, would
	// be lost.
	interest, err := hasInterestRetention(ctx, js, cfg.Stream)
	if err != nil {
		return path, spec, err
	}
	switch {
	case interest && path.mode == config.DeferSchedule:
		return path, spec, fmt.Errorf("THROTTLER_DEFER=schedule cannot move jobs in stream %s: its interest retention drops the moved copies no consumer reads; use a stream with limits or work-queue retention: %w", cfg.Stream, ErrUnsupported)
	case interest:
		log.Warn("the jobs stream has interest retention, which would drop moved jobs; deferring with NAK only: deferred jobs hold MaxAckPending slots while they wait",
			"stream", cfg.Stream)
		path.mode = config.DeferNak
		return path, spec, nil
	}
	spec.ScheduleSubjects = []string{cfg.Schedules.All()}
	spec.AllowDirect = true // a new stream serves the fast lane's reads directly
	return path, spec, nil
}

// captureOutputs makes sure a stream stores the forward and dead-letter
// subjects, which are published with publish acks; one it creates gets the
// jobs stream's replicas and the max age THROTTLER_FORWARD_MAX_AGE or
// THROTTLER_DLQ_MAX_AGE sets.
func captureOutputs(ctx context.Context, js jetstream.JetStream, cfg *Settings, replicas int, log *slog.Logger) error {
	for _, o := range []struct {
		spec  streams.CaptureSpec
		bound string
	}{
		{streams.CaptureSpec{Subject: cfg.Forward.Pattern(), Fallback: cfg.Stream + "_FORWARD", Replicas: replicas, MaxAge: cfg.ForwardMaxAge}, "THROTTLER_FORWARD_MAX_AGE"},
		{streams.CaptureSpec{Subject: cfg.DLQ.Pattern(), Fallback: cfg.Stream + "_DLQ", Replicas: replicas, MaxAge: cfg.DLQMaxAge}, "THROTTLER_DLQ_MAX_AGE"},
	} {
		s, err := streams.EnsureCaptured(ctx, js, o.spec)
		if err != nil {
			return refusedIsConfig(err, "a stream for "+o.spec.Subject, "THROTTLER_FORWARD_SUBJECT, THROTTLER_DLQ_SUBJECT and THROTTLER_STREAM")
		}
		warnUnbounded(s, "it stores "+o.spec.Subject, o.bound, o.spec.MaxAge, log)
		log.Debug("output subject captured", "subject", o.spec.Subject, "stream", s.CachedInfo().Config.Name)
	}
	return nil
}

// warnUnbounded warns about a stream the worker uses that keeps every
// message for ever: one that existed before, since the worker creates its
// streams bounded by their variable (bound, whose value is maxAge). It
// says nothing when that variable is 0, which asks to keep every message.
// The worker never changes the limits of a stream that exists.
func warnUnbounded(s jetstream.Stream, uses, bound string, maxAge time.Duration, log *slog.Logger) {
	c := s.CachedInfo().Config
	if maxAge == 0 || !streams.Unbounded(c) {
		return
	}
	log.Warn("stream "+c.Name+" keeps every message for ever, and grows without end; bound it, e.g. `nats stream edit "+c.Name+" --max-age 7d` (docs/operations.md, Storage)",
		"stream", c.Name, "uses", uses, "bound_for_new_streams", bound)
}

// warnOneCopy warns when the jobs stream has one replica on a clustered
// server: the cluster then keeps its jobs on one server only, and they
// are out of reach while that server is down (lost with its disk). The
// output streams and buckets the worker creates copy its replicas.
func warnOneCopy(s jetstream.Stream, cluster string, log *slog.Logger) {
	c := s.CachedInfo().Config
	if cluster == "" || c.Replicas > 1 {
		return
	}
	log.Warn("stream "+c.Name+" has one replica on a clustered NATS: its jobs are on one server only, out of reach while it is down; give it more, e.g. `nats stream edit "+c.Name+" --replicas 3` (a new stream: THROTTLER_STREAM_REPLICAS)",
		"stream", c.Name, "cluster", cluster)
}

// warnReplicasUnapplied warns when THROTTLER_STREAM_REPLICAS asks for
// more replicas than the jobs stream, which existed before, has: the
// setting applies to a stream the worker creates, and the worker never
// changes one that exists, so an operator who set it for an existing
// stream would otherwise believe the jobs had the copies asked for.
func warnReplicasUnapplied(s jetstream.Stream, want int, log *slog.Logger) {
	c := s.CachedInfo().Config
	if want <= 1 || c.Replicas >= want {
		return
	}
	log.Warn(fmt.Sprintf("THROTTLER_STREAM_REPLICAS=%d applies to a stream the worker creates: stream %s exists with %d and is left as it is; raise it with `nats stream edit %s --replicas %d` (on a clustered NATS)", want, c.Name, c.Replicas, c.Name, want),
		"stream", c.Name, "replicas", c.Replicas)
}

// b2i is 1 for true, else 0.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// consumerSpecs are the consumers the workers share: the jobs consumer
// first, then the bundles consumer when moved jobs may come back, then the
// fast lane's copies consumer when the lane runs, then the consumer of
// woken jobs when jobs may be parked under running caps.
func consumerSpecs(cfg *Settings, movesBack, lane, wakes bool) []streams.ConsumerSpec {
	specs := []streams.ConsumerSpec{{
		Stream:         cfg.Stream,
		Name:           cfg.Consumer,
		FilterSubjects: cfg.Subjects,
		MaxAckPending:  cfg.MaxAckPending,
		AckWait:        cfg.AckWait,
	}}
	if movesBack {
		specs = append(specs, streams.ConsumerSpec{
			Stream:         cfg.Stream,
			Name:           bundlesConsumer(cfg),
			FilterSubjects: []string{cfg.Schedules.Unpacks()},
			MaxAckPending:  1000,
			AckWait:        cfg.AckWait,
		})
	}
	if lane {
		specs = append(specs, streams.ConsumerSpec{
			Stream:         cfg.Stream,
			Name:           copiesConsumer(cfg),
			FilterSubjects: []string{cfg.Schedules.Fasts()},
			MaxAckPending:  cfg.MaxAckPending,
			AckWait:        cfg.AckWait,
		})
	}
	if wakes {
		specs = append(specs, streams.ConsumerSpec{
			Stream:         cfg.Stream,
			Name:           wokenConsumer(cfg),
			FilterSubjects: []string{cfg.Schedules.Wokens()},
			MaxAckPending:  cfg.MaxAckPending,
			AckWait:        cfg.AckWait,
		})
	}
	return specs
}

// The names of the workers' consumers besides the jobs consumer.
func bundlesConsumer(cfg *Settings) string  { return cfg.Consumer + "_bundles" }
func copiesConsumer(cfg *Settings) string   { return cfg.Consumer + "_fast" }
func wokenConsumer(cfg *Settings) string    { return cfg.Consumer + "_woken" }
func arrivalsConsumer(cfg *Settings) string { return cfg.Consumer + "_arrivals" }

// recreate sets up the jobs stream and the consumers of specs again.
func recreate(ctx context.Context, js jetstream.JetStream, cfg *Settings, spec streams.StreamSpec, specs []streams.ConsumerSpec, log *slog.Logger) error {
	// The first look is bounded by recreateTimeout, not the client's 5 s
	// a call: in a cluster's election no server answers, and the pull
	// that failed is retried (and this called again) sooner than a wait
	// would end. Once the stream answers, the rest takes milliseconds.
	sctx, cancel := context.WithTimeout(ctx, recreateTimeout)
	_, err := js.Stream(sctx, cfg.Stream)
	cancel()
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		// A stream created again at once under the name of one just
		// deleted can inherit the remains of the old one's store and take
		// no message (seen with nats-server 2.15.2): give the deletion time
		// to finish first.
		log.Warn("the jobs stream is gone; creating it again", "stream", cfg.Stream, "in", streamRecreateDelay)
		select {
		case <-time.After(streamRecreateDelay):
		case <-ctx.Done():
			return ctx.Err()
		}
	case err != nil:
		return fmt.Errorf("stream %s: %w", cfg.Stream, err)
	}
	if _, err := streams.EnsureStream(ctx, js, spec); err != nil {
		return err
	}
	for _, c := range specs {
		if _, err := streams.EnsureConsumer(ctx, js, c); err != nil {
			return err
		}
	}
	return nil
}

// hasInterestRetention reports whether the stream name exists with
// interest retention.
func hasInterestRetention(ctx context.Context, js jetstream.JetStream, name string) (bool, error) {
	s, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, nil // created with limits retention
	}
	if err != nil {
		return false, fmt.Errorf("stream %s: %w", name, err)
	}
	return s.CachedInfo().Config.Retention == jetstream.InterestPolicy, nil
}

// holdsMovedJobs reports whether the jobs stream is set up for moved jobs
// (message schedules on, the schedule subjects bound), so that some may
// still be waiting there.
func holdsMovedJobs(stream jetstream.Stream, cfg *Settings) bool {
	c := stream.CachedInfo().Config
	return c.AllowMsgSchedules && slices.Contains(c.Subjects, cfg.Schedules.All())
}

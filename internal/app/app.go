// Package app assembles the worker from a validated configuration and live
// connections: streams, consumer, limiter, deferral path and handler. Both
// `throttler` and `throttler demo` run it, so they share one wiring.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/config"
	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/subject"
	"github.com/throttler/throttler/throttle"
)

// failureTTL is how long a job's handler-failure count is kept after its
// last failure.
const failureTTL = 24 * time.Hour

// Options are what Run needs besides the configuration.
type Options struct {
	// NATS is a connection to the NATS server. Required.
	NATS *nats.Conn
	// Redis is the Redis client. Required.
	Redis throttle.Client
	// Handler runs admitted jobs. Defaults to the forward handler.
	Handler consumer.Handler
	// Logger receives logs. Defaults to slog.Default().
	Logger *slog.Logger
	// OnWorker, when set, is called with the worker once it is built, so a
	// caller can read its Stats.
	OnWorker func(*consumer.Worker)
}

// Run sets up the streams and the consumer, retrying with backoff while
// NATS is unreachable, then runs the worker until ctx is cancelled and the
// worker has shut down.
func Run(ctx context.Context, cfg *Settings, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	js, err := jetstream.New(opts.NATS)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}

	var (
		cons, bundles jetstream.Consumer
		path          deferPath
		recreate      func(context.Context) error
	)
	setup := func() error {
		var err error
		cons, bundles, path, recreate, err = ensure(ctx, opts.NATS, js, cfg, log)
		if errors.Is(err, ErrUnsupported) {
			return backoff.Permanent(err) // retrying cannot help
		}
		return err
	}
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 200 * time.Millisecond
	bo.MaxInterval = 10 * time.Second
	bo.MaxElapsedTime = 0
	notify := func(err error, d time.Duration) {
		log.Warn("setting up JetStream failed; retrying", "err", err, "retry_in", d)
	}
	if err := backoff.RetryNotify(setup, backoff.WithContext(bo, ctx), notify); err != nil {
		if ctx.Err() != nil {
			return nil // stopped before we started: nothing in flight
		}
		return err
	}

	limiter, err := throttle.New(opts.Redis, throttle.Options{Rules: cfg.Rules, Horizon: cfg.MaxDefer, Prefix: cfg.KeyPrefix})
	if err != nil {
		return err
	}
	// A Redis that is down now is no reason not to start: a decision that
	// finds the functions missing loads them itself.
	lctx, cancel := context.WithTimeout(ctx, cfg.RedisTimeout)
	if err := limiter.Load(lctx); err != nil {
		log.Warn("loading the throttle's Redis functions failed; they are loaded on first use", "err", err)
	}
	cancel()
	copies, err := throttle.NewCopies(limiter, failureTTL)
	if err != nil {
		return err
	}
	handler := opts.Handler
	if handler == nil {
		handler = consumer.Forwarder(js, cfg.Forward)
	}
	w, err := consumer.New(consumer.Params{
		JetStream: js,
		Consumer:  cons,
		Decider:   copies,
		Failures:  copies,
		Handler:   handler,
		Deferrer:  path.deferrer(js, cfg),
		Bundles:   bundles,
		FastLane:  path.fastLane(js, cfg, copies),
		Recreate:  recreate,
		Config:    path.workerConfig(cfg, log),
	})
	if err != nil {
		return err
	}
	if opts.OnWorker != nil {
		opts.OnWorker(w)
	}
	if cfg.MetricsAddr != "" {
		stop := serveMetrics(cfg.MetricsAddr, w, log)
		defer stop()
	}
	log.Info("worker running", "stream", cfg.Stream, "consumer", cfg.Consumer, "subjects", cfg.Subjects,
		"concurrency", cfg.Concurrency, "defer", path.mode, "fast_lane", path.fast != nil, "server", opts.NATS.ConnectedServerVersion())
	return w.Run(ctx)
}

// ErrUnsupported marks a configuration the NATS server cannot serve, such
// as THROTTLER_DEFER=schedule on a server without message schedules: a
// setting to change, not a failure to retry.
var ErrUnsupported = errors.New("a setting this NATS server or its streams cannot serve")

// deferPath is the deferral the worker uses, chosen at start from
// THROTTLER_DEFER and what the server supports.
type deferPath struct {
	mode           config.DeferMode // DeferNak, DeferAuto or DeferSchedule, as in force
	termWithReason bool
	// movesBack is set when moved jobs may come back: the worker moves jobs,
	// or the stream keeps the moved jobs of an earlier worker.
	movesBack bool
	// maxAge is the jobs stream's MaxAge at start (0: none): no deferred
	// job may sit in the stream that long.
	maxAge time.Duration
	// stream is the jobs stream; fast, when set, is the consumer of the
	// fast lane's copies, and the lane runs (see consumer.FastLane).
	stream jetstream.Stream
	fast   jetstream.Consumer
}

// jsErrSubjectsOverlap is the JetStream API error code of a stream whose
// subjects overlap another stream's (JSStreamSubjectOverlapErr).
const jsErrSubjectsOverlap = 10065

// overlapIsConfig turns err, from setting up the jobs stream, into a
// setting to change (ErrUnsupported, naming the variables) when the
// stream's subjects overlap another stream's: retrying cannot help. With
// withSchedules the schedule subjects were asked for too.
func overlapIsConfig(err error, cfg *Settings, withSchedules bool) error {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jsErrSubjectsOverlap {
		return err
	}
	vars := "THROTTLER_SUBJECTS"
	if withSchedules {
		vars = "THROTTLER_SUBJECTS or THROTTLER_SCHEDULE_SUBJECT"
	}
	return fmt.Errorf("the jobs stream %s cannot bind its subjects: %s overlaps the subjects of another stream: %w: %w", cfg.Stream, vars, err, ErrUnsupported)
}

// jsErrConsumerCreate is the JetStream API error code of a consumer that
// cannot be created or updated (JSConsumerCreateErrF); its description says
// why.
const jsErrConsumerCreate = 10012

// consumerIsConfig turns err, from creating or updating the durable
// consumer name, into a setting to change (ErrUnsupported, naming
// THROTTLER_CONSUMER) when a consumer of that name exists with settings
// JetStream cannot update (its deliver or ack policy, say): retrying
// cannot help.
func consumerIsConfig(err error, name string) error {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jsErrConsumerCreate || !strings.Contains(apiErr.Description, "can not") {
		return err
	}
	return fmt.Errorf("the durable consumer %s exists with settings the worker cannot change (%s); delete it, or set THROTTLER_CONSUMER to another name: %w: %w",
		name, apiErr.Description, err, ErrUnsupported)
}

// streamRecreateDelay is how long a worker waits before it creates again a
// jobs stream it found deleted.
const streamRecreateDelay = 2 * time.Second

// hasInterestRetention reports whether the stream name exists with
// interest retention.
func hasInterestRetention(ctx context.Context, js jetstream.JetStream, name string) (bool, error) {
	s, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, nil // created below, with limits retention
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

// ensure creates or checks the jobs stream, the output streams and the
// consumer, and chooses the deferral path. It also returns recreate, which
// sets up the jobs stream and the consumers again as chosen, for a worker
// that finds them deleted.
func ensure(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, cfg *Settings, log *slog.Logger) (cons, bundles jetstream.Consumer, path deferPath, recreate func(context.Context) error, err error) {
	if !nc.IsConnected() {
		return nil, nil, deferPath{}, nil, errors.New("not connected to NATS")
	}
	version := nc.ConnectedServerVersion()
	path = deferPath{mode: cfg.Defer, termWithReason: serverAtLeast(version, 2, 10)}
	spec := consumer.StreamSpec{Name: cfg.Stream, Subjects: cfg.Subjects}
	if path.mode != config.DeferNak {
		if !serverAtLeast(version, 2, 12) {
			if path.mode == config.DeferSchedule {
				return nil, nil, deferPath{}, nil, fmt.Errorf("THROTTLER_DEFER=schedule needs nats-server 2.12 or later for message schedules; this server is %s: %w", version, ErrUnsupported)
			}
			log.Warn("nats-server has no message schedules; deferring with NAK only: deferred jobs hold MaxAckPending slots while they wait",
				"server", version, "needs", "2.12")
			path.mode = config.DeferNak
		} else {
			spec.ScheduleSubjects = []string{cfg.Schedules.All()}
			spec.AllowDirect = true // for the fast lane, which may run
		}
	}
	if len(spec.ScheduleSubjects) > 0 {
		// A stream with interest retention drops at once a message no
		// consumer wants: a moved job's copy, which no consumer reads, would
		// be lost.
		interest, err := hasInterestRetention(ctx, js, cfg.Stream)
		if err != nil {
			return nil, nil, deferPath{}, nil, err
		}
		if interest && path.mode == config.DeferSchedule {
			return nil, nil, deferPath{}, nil, fmt.Errorf("THROTTLER_DEFER=schedule cannot move jobs in stream %s: its interest retention drops the moved copies no consumer reads; use a stream with limits or work-queue retention: %w", cfg.Stream, ErrUnsupported)
		}
		if interest {
			log.Warn("the jobs stream has interest retention, which would drop moved jobs; deferring with NAK only: deferred jobs hold MaxAckPending slots while they wait",
				"stream", cfg.Stream)
			path.mode = config.DeferNak
			spec.ScheduleSubjects = nil
		}
	}
	stream, err := consumer.EnsureStream(ctx, js, spec)
	if err != nil {
		if len(spec.ScheduleSubjects) == 0 || path.mode == config.DeferSchedule {
			return nil, nil, deferPath{}, nil, overlapIsConfig(err, cfg, len(spec.ScheduleSubjects) > 0)
		}
		log.Warn("cannot enable message schedules on the jobs stream; deferring with NAK only", "err", err)
		path.mode = config.DeferNak
		spec.ScheduleSubjects = nil
		if stream, err = consumer.EnsureStream(ctx, js, spec); err != nil {
			return nil, nil, deferPath{}, nil, overlapIsConfig(err, cfg, false)
		}
	}
	// Moved jobs come back on every path: a worker that NAKs only may share
	// the stream with jobs an earlier worker moved (before THROTTLER_DEFER
	// was set to nak), whose copies must still run once and whose bundles
	// must still be unpacked when they fire.
	path.movesBack = path.mode != config.DeferNak || holdsMovedJobs(stream, cfg)
	lane := path.mode != config.DeferNak && cfg.FastLane != config.FastLaneOff && laneAvailable(ctx, js, &stream, cfg, log)
	path.stream = stream
	path.maxAge = stream.CachedInfo().Config.MaxAge
	if path.maxAge > 0 && path.mode == config.DeferNak {
		log.Warn("the jobs stream drops messages older than its max age, and a job deferred with NAK stays the same message: a job deferred past it is lost; raise the max age, or defer with auto or schedule, which move such jobs",
			"stream", cfg.Stream, "max_age", path.maxAge)
	}
	if path.mode == config.DeferNak && path.movesBack {
		log.Info("the jobs stream keeps moved jobs; unpacking their bundles as they fire",
			"subjects", cfg.Schedules.All())
	}
	outputs := []struct {
		template subject.Template
		stream   string
	}{
		{cfg.Forward, cfg.Stream + "_FORWARD"},
		{cfg.DLQ, cfg.Stream + "_DLQ"},
	}
	for _, o := range outputs {
		pattern := o.template.Pattern()
		name, err := consumer.EnsureCaptured(ctx, js, pattern, o.stream)
		if err != nil {
			return nil, nil, deferPath{}, nil, err
		}
		log.Debug("output subject captured", "subject", pattern, "stream", name)
	}
	consumers := []consumer.ConsumerSpec{{
		Stream:         cfg.Stream,
		Name:           cfg.Consumer,
		FilterSubjects: cfg.Subjects,
		MaxAckPending:  cfg.MaxAckPending,
		AckWait:        cfg.AckWait,
	}}
	if path.movesBack {
		// Fired bundles of moved jobs land on
		// <schedule prefix>.u.<tenant>.<id>; a consumer of their own
		// unpacks them.
		consumers = append(consumers, consumer.ConsumerSpec{
			Stream:         cfg.Stream,
			Name:           cfg.Consumer + "_bundles",
			FilterSubjects: []string{cfg.Schedules.Unpacks()},
			MaxAckPending:  1000,
			AckWait:        cfg.AckWait,
		})
	}
	if lane {
		// The fast lane's copies land on <schedule prefix>.f.<tenant>.<seq>.
		consumers = append(consumers, consumer.ConsumerSpec{
			Stream:         cfg.Stream,
			Name:           cfg.Consumer + "_fast",
			FilterSubjects: []string{cfg.Schedules.Fasts()},
			MaxAckPending:  cfg.MaxAckPending,
			AckWait:        cfg.AckWait,
		})
	}
	handles := make([]jetstream.Consumer, len(consumers))
	for i, c := range consumers {
		if handles[i], err = consumer.EnsureConsumer(ctx, js, c); err != nil {
			return nil, nil, deferPath{}, nil, consumerIsConfig(err, c.Name)
		}
	}
	recreate = func(ctx context.Context) error {
		if _, err := js.Stream(ctx, cfg.Stream); errors.Is(err, jetstream.ErrStreamNotFound) {
			// A stream created again at once under the name of one just
			// deleted can inherit the remains of the old one's store and
			// take no message (seen with nats-server 2.15.2): give the
			// deletion time to finish first.
			log.Warn("the jobs stream is gone; creating it again", "stream", cfg.Stream, "in", streamRecreateDelay)
			select {
			case <-time.After(streamRecreateDelay):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		s, err := consumer.EnsureStream(ctx, js, spec)
		if err != nil {
			return err
		}
		if lane {
			if _, err := consumer.PrepareArrivals(ctx, js, s, arrivalsSubject(cfg)); err != nil {
				return err
			}
		}
		for _, c := range consumers {
			if _, err := consumer.EnsureConsumer(ctx, js, c); err != nil {
				return err
			}
		}
		return nil
	}
	cons = handles[0]
	if path.movesBack {
		bundles = handles[1]
	}
	if lane {
		path.fast = handles[len(handles)-1]
	}
	return cons, bundles, path, recreate, nil
}

// arrivalsSubject is where the jobs stream republishes the headers of the
// messages it stores, for the fast lane.
func arrivalsSubject(cfg *Settings) string {
	return "_throttler.arrived." + cfg.Stream + ".>"
}

// laneAvailable reports whether the fast lane can run on the jobs stream,
// readying the stream for it (and then replacing *stream with the stream
// as updated). The lane deletes the
// originals it copies, so a stream that denies deletes has none, nor does
// a stream another consumer reads jobs from; nor does a stream that
// republishes elsewhere already.
func laneAvailable(ctx context.Context, js jetstream.JetStream, stream *jetstream.Stream, cfg *Settings, log *slog.Logger) bool {
	if (*stream).CachedInfo().Config.DenyDelete {
		log.Warn("fast lane off: the jobs stream denies deletes; a tenant's jobs stored behind another tenant's backlog wait for it", "stream", cfg.Stream)
		return false
	}
	if other, err := otherJobsConsumer(ctx, *stream, cfg); err != nil || other != "" {
		log.Warn("fast lane off: the jobs stream has a consumer of the job subjects besides this worker's, and the lane deletes the jobs it copies; a tenant's jobs stored behind another tenant's backlog wait for it",
			"stream", cfg.Stream, "consumer", other, "err", err)
		return false
	}
	s, err := consumer.PrepareArrivals(ctx, js, *stream, arrivalsSubject(cfg))
	if err != nil {
		log.Warn("fast lane off: a tenant's jobs stored behind another tenant's backlog wait for it", "stream", cfg.Stream, "err", err)
		return false
	}
	*stream = s
	return true
}

// otherJobsConsumer returns the name of a consumer of the jobs stream,
// not one of this worker's, that may deliver job subjects, or "" when
// there is none. Such a consumer would never see the jobs the fast lane
// takes, whose originals it deletes.
func otherJobsConsumer(ctx context.Context, stream jetstream.Stream, cfg *Settings) (string, error) {
	ours := []string{cfg.Consumer, cfg.Consumer + "_bundles", cfg.Consumer + "_fast"}
	list := stream.ListConsumers(ctx)
	other := ""
	// Read to the end: the lister's goroutine blocks until every consumer
	// is taken.
	for info := range list.Info() {
		if other != "" || slices.Contains(ours, info.Name) {
			continue
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

// fastLane is the fast lane of the path, or nil when it has none.
func (p deferPath) fastLane(js jetstream.JetStream, cfg *Settings, owners consumer.OwnerClaimer) *consumer.FastLane {
	if p.fast == nil {
		return nil
	}
	dest := arrivalsSubject(cfg)
	return &consumer.FastLane{
		Republish: func(ctx context.Context, on bool) error {
			if on {
				// A consumer added since start would miss the jobs taken.
				other, err := otherJobsConsumer(ctx, p.stream, cfg)
				if err != nil {
					return err
				}
				if other != "" {
					return fmt.Errorf("the jobs stream has a consumer of the job subjects besides this worker's (%s), and the lane deletes the jobs it copies: not republishing arrivals", other)
				}
			}
			return consumer.SetArrivals(ctx, js, cfg.Stream, dest, on)
		},
		ArrivalsOn:  consumer.RepublishesArrivals(p.stream, dest),
		Arrivals:    arrivalsSubject(cfg),
		Queue:       cfg.Consumer + "_fast",
		Stream:      p.stream,
		Consumer:    p.fast,
		Subjects:    cfg.Schedules,
		Owners:      owners,
		JobSubjects: cfg.Subjects,
		TenantShare: max(1, cfg.MaxAckPending/40),
		MoveRate:    laneMoveRate(cfg.LaneMoveRate),
	}
}

// laneMoveRate is FastLane.MoveRate for THROTTLER_LANE_MOVE_RATE, where 0
// means no cap.
func laneMoveRate(perSecond int) int {
	if perSecond == 0 {
		return -1
	}
	return perSecond
}

// deferrer builds the Deferrer of the path.
func (p deferPath) deferrer(js jetstream.JetStream, cfg *Settings) consumer.Deferrer {
	move := consumer.ScheduleDeferrer{
		JetStream: js,
		Subjects:  cfg.Schedules,
		Timeout:   cfg.RedisTimeout + 3*time.Second,
		Bundle:    64,
		MaxWait:   p.maxAge / 2, // a copy comes back long before the stream would drop it
	}
	switch p.mode {
	case config.DeferSchedule:
		return move
	case config.DeferAuto:
		return &consumer.FairDeferrer{
			Move:        move,
			MoveAfter:   cfg.ScheduleAfter,
			TenantShare: max(1, cfg.MaxAckPending/40),
			MaxAge:      p.maxAge,
		}
	}
	return consumer.NakDeferrer{}
}

// workerConfig is the worker's configuration on this path.
func (p deferPath) workerConfig(cfg *Settings, log *slog.Logger) consumer.Config {
	c := WorkerConfig(cfg, log)
	c.TermWithReason = p.termWithReason
	return c
}

// serverAtLeast reports whether a "MAJOR.MINOR.PATCH" server version is at
// least major.minor.
func serverAtLeast(version string, major, minor int) bool {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || (ma == major && mi >= minor)
}

// WorkerConfig maps the configuration onto the worker's, for NAK-only
// deferral on a current server.
func WorkerConfig(cfg *Settings, log *slog.Logger) consumer.Config {
	policy := consumer.DeferOnRedisError
	if cfg.OnRedisError == config.OnRedisErrorAllow {
		policy = consumer.AllowOnRedisError
	}
	inProgress := cfg.AckWait / 3
	if inProgress < 100*time.Millisecond {
		inProgress = 100 * time.Millisecond
	}
	// Messages pulled and not yet decided count against MaxAckPending: keep
	// them (at most 2×FetchBatch per worker) to a quarter of it.
	fetch := min(cfg.FetchBatch, max(1, cfg.MaxAckPending/8))
	return consumer.Config{
		Tenant:          cfg.TenantFrom,
		CostHeader:      cfg.CostHeader,
		Concurrency:     cfg.Concurrency,
		FetchBatch:      fetch,
		MaxFailures:     cfg.MaxFailures,
		OnRedisError:    policy,
		RedisTimeout:    cfg.RedisTimeout,
		ShutdownTimeout: cfg.ShutdownTimeout,
		InProgressEvery: inProgress,
		DLQSubject:      cfg.DLQ,
		StatsTenants:    cfg.MetricsTenants,
		Logger:          log,
	}
}

// serveMetrics serves /healthz and /metrics on addr until stop is called.
func serveMetrics(addr string, w *consumer.Worker, log *slog.Logger) (stop func()) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) { fmt.Fprintln(rw, "ok") })
	mux.Handle("/metrics", consumer.MetricsHandler(w))
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server failed", "addr", addr, "err", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
}

package consumer_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/consumer"
	"github.com/throttler/throttler/release"
	"github.com/throttler/throttler/streams"
	"github.com/throttler/throttler/subject"
	"github.com/throttler/throttler/throttle"
)

// This example embeds the worker in a program of your own: it throttles jobs
// published to jobs.<tenant>.… to 100/s per tenant (bursts of 200), runs at
// most 5 of acme's at once and 50 of all tenants', and runs each admitted
// job through sendMail, until SIGINT or SIGTERM. It needs a Redis and a
// NATS server with JetStream, so it is compiled but not run.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Drain()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}

	limiter, err := throttle.New(rdb, throttle.Options{
		Policies: throttle.Rules{
			Default: throttle.Enforce(throttle.PerSecond(100, 200)),
			Tenants: map[string]throttle.Policy{"acme": {Limits: throttle.Limits{throttle.PerSecond(100, 200)}, Running: 5}},
		},
		Horizon: 10 * time.Minute,
	})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := streams.EnsureStream(ctx, js, streams.StreamSpec{Name: "JOBS", Subjects: []string{"jobs.>"}}); err != nil {
		log.Fatal(err)
	}
	cons, err := streams.EnsureConsumer(ctx, js, streams.ConsumerSpec{Stream: "JOBS", Name: "mailer",
		FilterSubjects: []string{"jobs.>"}, MaxAckPending: 1000, AckWait: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	if err := limiter.Load(ctx); err != nil {
		log.Print(err) // loaded on first use
	}
	// Running caps: a job runs holding a lease, which the worker renews
	// while it runs and gives back when it ends (caps is the Leaser).
	caps, err := throttle.NewRunningCaps(limiter, throttle.CapOptions{MaxRunning: 50, LeaseTTL: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	decider, err := throttle.NewDecider(limiter, caps)
	if err != nil {
		log.Fatal(err)
	}
	failures, err := throttle.NewFailures(limiter, 24*time.Hour)
	if err != nil {
		log.Fatal(err)
	}
	w, err := consumer.New(consumer.Params{JetStream: js, Consumer: cons, Decider: decider, Failures: failures, Leases: caps,
		Handler: func(ctx context.Context, job consumer.Job) error { return sendMail(ctx, job.Tenant, job.Data) }})
	if err != nil {
		log.Fatal(err)
	}
	// Run returns once ctx is cancelled and the shutdown is done.
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// sendMail stands in for the application's work.
func sendMail(ctx context.Context, tenant string, body []byte) error {
	return ctx.Err()
}

// This example moves jobs that must wait a while off the consumer rather
// than NAK'ing them, as THROTTLER_DEFER=auto does (nats-server 2.12 or
// later): a job whose wait is 5 s or more, whose tenant already has 25
// NAK'd jobs on this worker, or that arrives while the consumer is
// crowded is stored again as a copy scheduled to come back just before
// its slot, and its place in MaxAckPending is freed. Jobs parked for
// their turn under a running cap are woken at their turn (release.Waker)
// and pulled past the backlog from a consumer of the woken subjects;
// bundles of moved jobs are unpacked as they fire. Stats gives the
// per-tenant counts, as /metrics shows them.
func Example_moveWaitingJobs() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Drain()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	limiter, err := throttle.New(rdb, throttle.Options{Policies: throttle.Rules{Default: throttle.Enforce(throttle.PerSecond(100, 200))}})
	if err != nil {
		log.Fatal(err)
	}
	decider, err := throttle.NewDecider(limiter, nil)
	if err != nil {
		log.Fatal(err)
	}
	failures, err := throttle.NewFailures(limiter, 24*time.Hour)
	if err != nil {
		log.Fatal(err)
	}

	// The moved copies live in the jobs stream, on subjects its consumers
	// do not read.
	sched := subject.Schedules("sched")
	if _, err := streams.EnsureStream(ctx, js, streams.StreamSpec{Name: "JOBS", Subjects: []string{"jobs.>"},
		ScheduleSubjects: []string{sched.All()}}); err != nil {
		log.Fatal(err)
	}
	consumerOf := func(name, filter string) jetstream.Consumer {
		c, err := streams.EnsureConsumer(ctx, js, streams.ConsumerSpec{Stream: "JOBS", Name: name,
			FilterSubjects: []string{filter}, MaxAckPending: 1000, AckWait: 30 * time.Second})
		if err != nil {
			log.Fatal(err)
		}
		return c
	}
	cons := consumerOf("mailer", "jobs.>")
	ackPending := consumer.NewAckPending(cons, 250*time.Millisecond)
	deferrer := &consumer.FairDeferrer{
		Move: consumer.ScheduleDeferrer{JetStream: js, Subjects: sched, Bundle: 64, Lead: consumer.ScheduleLead},
		// MoveAfter left at its default: waits of 5 s or more are moved.
		TenantShare: 25,
		MaxNaked:    consumer.NakedPerWorker,
		AckPending:  ackPending.Count,
	}
	stats := consumer.NewStats(100)
	w, err := consumer.New(consumer.Params{JetStream: js, Consumer: cons, Decider: decider, Failures: failures,
		Handler:    func(ctx context.Context, job consumer.Job) error { return sendMail(ctx, job.Tenant, job.Data) },
		Deferrer:   deferrer,
		AckPending: ackPending,
		Waker:      &release.Waker{JetStream: js, Subjects: sched},
		Woken:      consumerOf("mailer_woken", sched.Wokens()),
		Bundles:    consumerOf("mailer_bundles", sched.Unpacks()),
		Stats:      stats,
		// A job that must wait under 750 ms waits in the worker for its slot.
		Config: consumer.Config{ShortWait: consumer.ScheduleLead},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
	for tenant, s := range stats.Snapshot() {
		log.Printf("%s: %d completed, %d moved", tenant, s.Completed, s.Moved)
	}
}

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
	"github.com/throttler/throttler/streams"
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

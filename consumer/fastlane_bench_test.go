package consumer

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/testenv"
)

// arrivalsJobs is how many jobs each run of BenchmarkArrivals publishes.
const arrivalsJobs = 20_000

// BenchmarkArrivals measures what the fast lane costs every job stored
// while the workers run, with no backlog to pass: the jobs stream
// republishing the headers of each message it stores, and a worker reading
// each arrival (lane.arrive: parse, book, leave it to the consumer). Pairs
// run back to back publish 20,000 jobs (asynchronously, 64 bytes, 100
// tenants) to a fresh stream without the lane's RePublish, then to one
// with it and a lane subscribed, until every publish is acked (and, with
// the lane, every arrival read). It reports the median, lowest and highest
// ratio of the publishing throughputs (with the lane / without), the median
// jobs/s of each side, and the CPU time per job of this process (the
// in-process nats-server, the publisher and the lane) on each side.
//
//	go test -run '^$' -bench BenchmarkArrivals -benchtime 1x ./consumer/
func BenchmarkArrivals(b *testing.B) {
	srv := testenv.StartNATS(b, "")
	js, err := jetstream.New(srv.Connect(b))
	if err != nil {
		b.Fatal(err)
	}
	sub := srv.Connect(b) // the lane's connection, as in a worker
	streams := 0
	run := func(withLane bool) (jobsPerSec float64, cpuPerJob time.Duration) {
		b.StopTimer()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		streams++
		name := fmt.Sprintf("ARRIVALS_%d", streams)
		subject := fmt.Sprintf("arr%d", streams)
		sc := jetstream.StreamConfig{Name: name, Subjects: []string{subject + ".*"}, Storage: jetstream.FileStorage}
		var read atomic.Int64
		all := make(chan struct{})
		if withLane {
			dest := "_throttler.arrived." + name + ".>"
			sc.RePublish = &jetstream.RePublish{Source: ">", Destination: dest, HeadersOnly: true}
			sc.AllowDirect = true
			l := &lane{FastLane: FastLane{Backlog: 256, TenantShare: 25, JobSubjects: []string{subject + ".*"}},
				w: &Worker{cfg: Config{}.withDefaults()}, work: make(chan arrival, 1024),
				slow: map[string]uint64{}, taken: map[string][]uint64{}}
			l.observe(1, 0) // the consumer keeps up: nothing to take
			s, err := sub.QueueSubscribe(dest, "lane", func(m *nats.Msg) {
				l.arrive(m)
				if read.Add(1) == arrivalsJobs {
					close(all)
				}
			})
			if err != nil {
				b.Fatal(err)
			}
			if err := s.SetPendingLimits(-1, -1); err != nil {
				b.Fatal(err)
			}
			defer func() { _ = s.Unsubscribe() }()
			if err := sub.Flush(); err != nil {
				b.Fatal(err)
			}
		} else {
			close(all)
		}
		if _, err := js.CreateStream(ctx, sc); err != nil {
			b.Fatal(err)
		}
		defer func() { _ = js.DeleteStream(context.Background(), name) }()
		payload := make([]byte, 64)
		cpu0, err := testenv.ProcessCPU()
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		b.StartTimer()
		for i := range arrivalsJobs {
			if _, err := js.PublishAsync(fmt.Sprintf("%s.t%d", subject, i%100), payload, jetstream.WithStallWait(time.Minute)); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			b.Fatal("publishing timed out")
		}
		select {
		case <-all:
		case <-ctx.Done():
			b.Fatalf("the lane read %d of %d arrivals", read.Load(), arrivalsJobs)
		}
		elapsed := time.Since(start)
		b.StopTimer()
		cpu1, err := testenv.ProcessCPU()
		if err != nil {
			b.Fatal(err)
		}
		return arrivalsJobs / elapsed.Seconds(), (cpu1 - cpu0) / arrivalsJobs
	}
	var ratios, plain, laned, plainCPU, lanedCPU []float64
	for range b.N {
		for range 7 {
			p, pc := run(false)
			l, lc := run(true)
			ratios = append(ratios, l/p)
			plain, laned = append(plain, p), append(laned, l)
			plainCPU, lanedCPU = append(plainCPU, float64(pc.Nanoseconds())/1000), append(lanedCPU, float64(lc.Nanoseconds())/1000)
		}
	}
	testenv.ReportRatios(b, ratios)
	b.ReportMetric(testenv.Median(plain), "plain-jobs/s")
	b.ReportMetric(testenv.Median(laned), "lane-jobs/s")
	b.ReportMetric(testenv.Median(plainCPU), "plain-cpu-µs/job")
	b.ReportMetric(testenv.Median(lanedCPU), "lane-cpu-µs/job")
}

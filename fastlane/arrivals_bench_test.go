package fastlane

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/subject"
	"github.com/throttler/throttler/tenant"
)

// arrivalsJobs is how many jobs each run of BenchmarkArrivals publishes.
const arrivalsJobs = 20_000

// arrivalsPairs is how many pairs of runs one iteration of
// BenchmarkArrivals measures.
const arrivalsPairs = 7

// BenchmarkArrivals measures what reading arrivals costs each job stored
// while a lane reads them, with no backlog to pass: the server delivering
// the headers of each message to the lane's arrivals consumer (headers
// only, AckNone, R1 in memory), and the lane reading each (onArrival:
// parse, book, leave it to the jobs consumer). Each pair of runs publishes
// 20,000 jobs (asynchronously, 64 bytes, 100 tenants) to a fresh
// file-stored stream without an arrivals reader, and to one whose
// arrivals a lane reads through its consumer with a Consume loop, as
// Lane.startReading does, until every publish is acked (and, with the
// lane, every arrival read); the order alternates from pair to pair. It
// reports the median, lowest and highest ratio of the publishing
// throughputs (with the lane / without), the median jobs/s of each side,
// the CPU time per job of this process (the in-process nats-server, the
// publisher and the lane) on each side, and the median of the pairs'
// extra CPU per job with the lane.
//
//	go test -run '^$' -bench BenchmarkArrivals -benchtime 1x ./fastlane/
func BenchmarkArrivals(b *testing.B) {
	srv := testenv.StartNATS(b, "")
	js, err := jetstream.New(srv.Connect(b))
	if err != nil {
		b.Fatal(err)
	}
	laneJS, err := jetstream.New(srv.Connect(b)) // the lane's connection, as in a worker
	if err != nil {
		b.Fatal(err)
	}
	streams := 0
	run := func(withLane bool) (jobsPerSec float64, cpuPerJob time.Duration) {
		b.StopTimer()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		streams++
		name := fmt.Sprintf("ARRIVALS_%d", streams)
		subj := fmt.Sprintf("arr%d", streams)
		stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subj + ".*"},
			Storage: jetstream.FileStorage, AllowDirect: true})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = js.DeleteStream(context.Background(), name) }()

		var read atomic.Int64
		all := make(chan struct{})
		if withLane {
			l, err := New(Config{
				JetStream: laneJS, Stream: stream,
				Jobs:        &fakeConsumer{info: &jetstream.ConsumerInfo{}},
				Copies:      &fakeConsumer{info: &jetstream.ConsumerInfo{}},
				Arrivals:    "workers_arrivals",
				JobSubjects: []string{subj + ".*"},
				Subjects:    subject.Schedules("sched_" + subj),
				Tenant:      tenant.FromSubject(2),
				CostHeader:  "Job-Cost",
				Decider:     newFakeOwners(),
				Owners:      newFakeOwners(),
				Log:         discard,
			})
			if err != nil {
				b.Fatal(err)
			}
			l.Observe(1, 0) // the jobs consumer keeps up: nothing to take
			cons, err := l.arrivalsConsumer(ctx)
			if err != nil {
				b.Fatal(err)
			}
			cc, err := cons.Consume(func(m jetstream.Msg) {
				l.onArrival(m)
				if read.Add(1) == arrivalsJobs {
					close(all)
				}
			})
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Stop()
		} else {
			close(all)
		}

		payload := make([]byte, 64)
		cpu0, err := testenv.ProcessCPU()
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		b.StartTimer()
		for i := range arrivalsJobs {
			if _, err := js.PublishAsync(fmt.Sprintf("%s.t%d", subj, i%100), payload, jetstream.WithStallWait(time.Minute)); err != nil {
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
	µs := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	var ratios, plain, laned, plainCPU, lanedCPU, extraCPU []float64
	for range b.N {
		for i := range arrivalsPairs {
			var p, l float64
			var pc, lc time.Duration
			if i%2 == 0 {
				p, pc = run(false)
				l, lc = run(true)
			} else {
				l, lc = run(true)
				p, pc = run(false)
			}
			ratios = append(ratios, l/p)
			plain, laned = append(plain, p), append(laned, l)
			plainCPU, lanedCPU = append(plainCPU, µs(pc)), append(lanedCPU, µs(lc))
			extraCPU = append(extraCPU, µs(lc-pc))
		}
	}
	testenv.ReportRatios(b, ratios)
	b.ReportMetric(testenv.Median(plain), "plain-jobs/s")
	b.ReportMetric(testenv.Median(laned), "lane-jobs/s")
	b.ReportMetric(testenv.Median(plainCPU), "plain-cpu-µs/job")
	b.ReportMetric(testenv.Median(lanedCPU), "lane-cpu-µs/job")
	b.ReportMetric(testenv.Median(extraCPU), "extra-cpu-µs/job")
}

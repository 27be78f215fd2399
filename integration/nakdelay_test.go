package integration

import (
	"context"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/demo"
	"github.com/throttler/throttler/internal/testenv"
)

// BenchmarkNakDelay measures how late JetStream redelivers messages NAK'd
// with a delay, on a bare consumer (no worker), with few and with many
// messages pending on the consumer, while another reader keeps acking
// messages of the same consumer. nats-server redelivers a NAK'd message in
// its consumer's pending pass (consumer.go checkPending), which it skips
// and retries 100 ms later whenever an ack is being processed and more
// than 1,024 messages are pending: under a steady flow of acks, delays
// then come late, and the messages together. It reports the lateness
// (p50, p99, max) of the delayed messages' redeliveries.
//
//	go test -run '^$' -bench NakDelay -benchtime 1x ./integration/
func BenchmarkNakDelay(b *testing.B) {
	for _, pending := range []int{500, 900, 2000, 5000} {
		b.Run("pending-"+strconv.Itoa(pending), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				late := nakLateness(b, pending)
				b.ReportMetric(float64(demo.Percentile(late, 0.5).Microseconds())/1000, "late-p50-ms")
				b.ReportMetric(float64(demo.Percentile(late, 0.99).Microseconds())/1000, "late-p99-ms")
				b.ReportMetric(float64(late[len(late)-1].Microseconds())/1000, "late-max-ms")
			}
		})
	}
}

// nakLateness holds pending messages NAK'd on one consumer, each with a
// delay of 1 to 3 s, while a second reader fetches and acks 2,000 messages
// a second of the same consumer, and returns how late each NAK'd message
// came back, sorted.
func nakLateness(tb testing.TB, pending int) []time.Duration {
	tb.Helper()
	ns := testenv.StartNATS(tb, "")
	nc := ns.Connect(tb)
	js, err := jetstream.New(nc)
	must(tb, err, "jetstream")
	ctx := context.Background()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "N", Subjects: []string{"held", "flow"}})
	must(tb, err, "stream")
	cons, err := js.CreateOrUpdateConsumer(ctx, "N", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy,
		MaxAckPending: -1, AckWait: time.Minute})
	must(tb, err, "consumer")
	for i := 0; i < pending; i++ {
		_, err := js.PublishAsync("held", []byte(strconv.Itoa(i)))
		must(tb, err, "publish")
	}
	<-js.PublishAsyncComplete()

	// NAK every held message with a delay, recording when it is due.
	due := map[uint64]time.Time{}
	for got := 0; got < pending; {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(5*time.Second))
		must(tb, err, "fetch")
		for m := range batch.Messages() {
			meta, _ := m.Metadata()
			d := time.Second + time.Duration(meta.Sequence.Stream%2000)*time.Millisecond
			due[meta.Sequence.Stream] = time.Now().Add(d)
			must(tb, m.NakWithDelay(d), "nak")
			got++
		}
	}

	// Meanwhile: a steady flow of acks on the same consumer.
	fctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for fctx.Err() == nil {
			<-tick.C
			_, _ = js.PublishAsync("flow", nil)
			_, _ = js.PublishAsync("flow", nil)
		}
	})

	var late []time.Duration
	seen := map[uint64]bool{}
	deadline := time.Now().Add(30 * time.Second)
	for len(seen) < pending && time.Now().Before(deadline) {
		batch, err := cons.Fetch(100, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			continue
		}
		for m := range batch.Messages() {
			now := time.Now()
			meta, _ := m.Metadata()
			if m.Subject() == "held" && !seen[meta.Sequence.Stream] {
				seen[meta.Sequence.Stream] = true
				late = append(late, now.Sub(due[meta.Sequence.Stream]))
			}
			_ = m.Ack()
		}
	}
	stop()
	wg.Wait()
	if len(seen) < pending {
		tb.Fatalf("%d of %d NAK'd messages came back within 30 s", len(seen), pending)
	}
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	if testing.Verbose() {
		tb.Logf("%d pending: late p50 %s p99 %s max %s", pending, demo.Percentile(late, 0.5), demo.Percentile(late, 0.99), late[len(late)-1])
	}
	return late
}

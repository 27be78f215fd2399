package limits_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/limits"
	"github.com/throttler/throttler/throttle"
)

// benchTenants is how many tenants with a limit of their own the start-up
// benchmark loads.
const benchTenants = 100_000

// benchSpec is tenant i's spec: 1,000 plans, as a platform's customers
// share a few plans (each with its own figures here, to make sharing work).
func benchSpec(i int) string { return fmt.Sprintf("%d/s:%d", 10+i%1000, 20+i%1000) }

// openBench opens a fresh bucket on n's server for a benchmark.
func openBench(b *testing.B, n *testenv.NATS, name string) (*nats.Conn, jetstream.JetStream, jetstream.KeyValue) {
	b.Helper()
	nc := n.Connect(b)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(16384))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := limits.OpenBucket(ctx, js, name, 1)
	if err != nil {
		b.Fatal(err)
	}
	return nc, js, kv
}

// fill writes benchTenants keys into the bucket name, asynchronously (a
// platform's bucket fills over months; the benchmark needs it in seconds).
func fill(b *testing.B, js jetstream.JetStream, name string) {
	b.Helper()
	for i := range benchTenants {
		if _, err := js.PublishAsync(fmt.Sprintf("$KV.%s.t%06d", name, i), []byte(benchSpec(i))); err != nil {
			b.Fatalf("put %d: %v", i, err)
		}
		if i%8192 == 8191 || i == benchTenants-1 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				b.Fatal("the bucket's puts were not acknowledged")
			}
		}
	}
}

// startWatcher runs a Watcher over kv into a new Store until the benchmark
// ends, and returns the store and the watcher.
func startWatcher(b *testing.B, kv jetstream.KeyValue, nc *nats.Conn) (*limits.Store, *limits.Watcher) {
	b.Helper()
	store := limits.NewStore(throttle.Rules{Default: throttle.Enforce(throttle.PerSecond(100, 100))})
	w := &limits.Watcher{Store: store, Bucket: kv, DefaultBurst: 0, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Conn: nc}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	return store, w
}

// heap is the live heap after a collection.
func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkStartup measures a worker's start-up on a bucket of 100,000
// tenants' limits against an empty bucket, in the same run: from starting
// the watch to the first decision's policy (the worker decides nothing
// before every stored value is applied), and the memory the store holds per
// override. Run it with
//
//	go test -run '^$' -bench Startup -benchtime 3x ./limits/
func BenchmarkStartup(b *testing.B) {
	n := testenv.StartNATS(b, "")
	ncE, _, empty := openBench(b, n, "empty")
	nc, js, full := openBench(b, n, "full")
	fill(b, js, "full")
	want := throttle.Enforce(throttle.PerSecond(10+(benchTenants-1)%1000, 20+(benchTenants-1)%1000))

	start := func(kv jetstream.KeyValue, conn *nats.Conn, tenant string, want throttle.Policy) (time.Duration, *limits.Store) {
		t0 := time.Now()
		store, w := startWatcher(b, kv, conn)
		select {
		case <-w.Ready():
		case <-time.After(5 * time.Minute):
			b.Fatal("the watch never loaded the bucket")
		}
		if got := store.Policy(tenant); got.Limits.String() != want.Limits.String() {
			b.Fatalf("%s: %s, want %s", tenant, got.Limits, want.Limits)
		}
		return time.Since(t0), store
	}
	var emptyTimes, fullTimes []float64
	var perOverride float64
	b.ResetTimer()
	for range b.N {
		d, _ := start(empty, ncE, "t000001", throttle.Enforce(throttle.PerSecond(100, 100)))
		emptyTimes = append(emptyTimes, d.Seconds())
		before := heap()
		d, store := start(full, nc, fmt.Sprintf("t%06d", benchTenants-1), want)
		fullTimes = append(fullTimes, d.Seconds())
		if got := store.Overrides(); got != benchTenants {
			b.Fatalf("%d overrides, want %d", got, benchTenants)
		}
		perOverride = float64(heap()-before) / benchTenants
		runtime.KeepAlive(store)
	}
	b.StopTimer()
	e, f := testenv.Median(emptyTimes), testenv.Median(fullTimes)
	b.ReportMetric(e*1000, "empty-ms")
	b.ReportMetric(f*1000, "100k-ms")
	b.ReportMetric(f/e, "100k/empty")
	b.ReportMetric(perOverride, "B/override")
}

// BenchmarkPropagation measures how long a put takes to govern decisions
// on three workers watching the bucket, each with its own connection:
// from the put's start until each worker's store returns the new policy
// (the next decision uses it), over 100 changes, 20 ms apart. Run it with
//
//	go test -run '^$' -bench Propagation -benchtime 1x ./limits/
func BenchmarkPropagation(b *testing.B) {
	n := testenv.StartNATS(b, "")
	_, _, kv := openBench(b, n, "limits")
	var stores []*limits.Store
	for range 3 {
		nc := n.Connect(b)
		js, err := jetstream.New(nc)
		if err != nil {
			b.Fatal(err)
		}
		wkv, err := js.KeyValue(context.Background(), "limits")
		if err != nil {
			b.Fatal(err)
		}
		s, w := startWatcher(b, wkv, nc)
		<-w.Ready()
		stores = append(stores, s)
	}
	const changes = 100
	var all, slowest []float64
	b.ResetTimer()
	for range b.N {
		for i := range changes {
			spec := fmt.Sprintf("%d/s", 1000+i)
			t0 := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := kv.PutString(ctx, "acme", spec)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			var worst time.Duration
			for _, s := range stores {
				for s.Policy("acme").Limits[0].Rate != int64(1000+i) {
					if time.Since(t0) > 10*time.Second {
						b.Fatalf("change %d never reached a worker", i)
					}
					time.Sleep(50 * time.Microsecond)
				}
				d := time.Since(t0)
				all = append(all, d.Seconds())
				worst = max(worst, d)
			}
			slowest = append(slowest, worst.Seconds())
			time.Sleep(20 * time.Millisecond)
		}
	}
	b.StopTimer()
	slices.Sort(all)
	slices.Sort(slowest)
	q := func(xs []float64, p float64) float64 { return xs[int(p*float64(len(xs)-1))] * 1000 }
	b.ReportMetric(q(all, 0.5), "p50-ms")
	b.ReportMetric(q(all, 0.99), "p99-ms")
	b.ReportMetric(q(slowest, 0.5), "all-3-p50-ms")
	b.ReportMetric(q(slowest, 0.99), "all-3-p99-ms")
}

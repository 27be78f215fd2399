package top

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/throttler/throttler/internal/testenv"
)

// BenchmarkGather100k is `throttler top` against three workers that each
// know the same 100,000 tenants: the request, the three replies over a
// real NATS server, their reading, the sum and the sort. Each worker's
// reply is encoded once, beforehand (its cost is the consumer package's
// BenchmarkTopAnswer100k). Target: under 2 s.
func BenchmarkGather100k(b *testing.B) {
	srv := testenv.StartNATS(b, "")
	const tenants, workers = 100_000, 3
	rows := make([]Row, tenants)
	for i := range rows {
		rows[i] = Row{Tenant: fmt.Sprintf("tenant-%06d", i), Admitted: 1, Deferred: 2, Naked: int64(i % 7), Moved: int64(i % 100),
			OldestWait: 3.5, Binding: "limit 50/s:100"}
	}
	for w := range workers {
		nc := srv.Connect(b)
		chunks := EncodeRows(fmt.Sprintf("w%d", w), rows)
		if _, err := nc.Subscribe("top.test", func(m *nats.Msg) {
			for _, c := range chunks {
				_ = nc.Publish(m.Reply, c)
			}
		}); err != nil {
			b.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	nc := srv.Connect(b)
	var worst time.Duration
	for b.Loop() {
		began := time.Now()
		v, err := Gather(context.Background(), nc, Options{Subject: "top.test", N: 20})
		took := time.Since(began)
		if err != nil || v.Workers != workers || v.Tenants != tenants || v.More != tenants-20 || v.Rows[0].Moved != 99*workers {
			b.Fatalf("view of %d workers, %d tenants, %d more, first %+v, %v", v.Workers, v.Tenants, v.More, v.Rows[0], err)
		}
		worst = max(worst, took)
	}
	b.ReportMetric(worst.Seconds(), "worst-s")
}

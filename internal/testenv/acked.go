package testenv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// WaitAcked polls cons every millisecond until it has nothing pending and
// nothing awaiting an ack, and fails tb when timeout passes first. It
// polls faster than Eventually, for benchmarks that time the last ack.
func WaitAcked(tb testing.TB, cons jetstream.Consumer, timeout time.Duration) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		info, err := cons.Info(ctx)
		if err != nil && !errors.Is(err, nats.ErrTimeout) {
			tb.Fatalf("testenv: consumer info: %v", err)
		}
		if err == nil && info.NumAckPending == 0 && info.NumPending == 0 {
			return
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("testenv: jobs still unacked after %s: %+v", timeout, info)
		case <-tick.C:
		}
	}
}

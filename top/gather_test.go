package top_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/throttler/throttler/internal/testenv"
	"github.com/throttler/throttler/top"
)

// With no worker subscribed, NATS answers the request itself with an
// empty "no responders" status: Gather says no worker answered, at once,
// rather than read that status as a worker's bad reply.
func TestGatherWithoutWorkers(t *testing.T) {
	nc := testenv.StartNATS(t, t.TempDir()).Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := top.Gather(ctx, nc, top.Options{Subject: "_THROTTLER.JOBS.throttler.top", Wait: time.Minute})
	if !errors.Is(err, top.ErrNoWorkers) {
		t.Fatalf("Gather with no worker: %v, want ErrNoWorkers", err)
	}
}

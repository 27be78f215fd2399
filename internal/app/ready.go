package app

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
)

// readyEvery is how long a readiness verdict is kept: probes in between
// get it without asking NATS or Redis, so however many probes come, the
// worker sends at most one consumer-info request and one PING a second.
const readyEvery = time.Second

// readyTimeout bounds one check: well under the 1 s Kubernetes gives a
// probe by default (timeoutSeconds), so a hung server reads as not ready
// rather than as a probe that timed out.
const readyTimeout = 500 * time.Millisecond

// pinger is what readiness asks of the Redis client; *redis.Client,
// *redis.ClusterClient and *redis.Ring all have it.
type pinger interface {
	Ping(ctx context.Context) *redis.StatusCmd
}

// readiness answers /readyz: ready while the worker runs (not setting up,
// not stopping), is connected to NATS and can read its jobs consumer, and
// Redis answers PING. With THROTTLER_ON_REDIS_ERROR=allow the worker runs
// jobs without Redis, so Redis not answering is only noted. Safe for
// concurrent use.
type readiness struct {
	stop       context.Context // cancelled when the worker stops
	nc         *nats.Conn
	redis      pinger // nil: not checked (a client without Ping)
	allowRedis bool   // Redis down does not stop readiness

	consMu sync.Mutex
	cons   jetstream.Consumer // the jobs consumer once the worker runs

	mu      sync.Mutex // held through a check: one at a time
	at      time.Time  // when last was found; zero before
	last    verdict
	timeout time.Duration // bounds a check; readyTimeout but in tests
	every   time.Duration // how long last is kept; readyEvery but in tests
}

// verdict is the outcome of one readiness check.
type verdict struct {
	problems []string // what is not ready; none when ready
	notes    []string // what is amiss without making it unready
}

// newReadiness returns the readiness of a worker that runs until stop is
// cancelled; it reads not ready until running is called. rdb, the
// worker's Redis client, is asked PING when it has that method (the
// go-redis clients do); a client without it is not checked.
func newReadiness(stop context.Context, nc *nats.Conn, rdb any, allowRedis bool) *readiness {
	p, _ := rdb.(pinger)
	return &readiness{stop: stop, nc: nc, redis: p, allowRedis: allowRedis, timeout: readyTimeout, every: readyEvery}
}

// running says the worker now pulls from cons.
func (r *readiness) running(cons jetstream.Consumer) {
	r.consMu.Lock()
	defer r.consMu.Unlock()
	r.cons = cons
}

// consumer returns the jobs consumer, nil before the worker runs.
func (r *readiness) consumer() jetstream.Consumer {
	r.consMu.Lock()
	defer r.consMu.Unlock()
	return r.cons
}

// ServeHTTP answers 200 "ok" when ready (followed by notes, if any) and
// 503 "not ready: ..." naming what is not.
func (r *readiness) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	v := r.verdict(req.Context())
	rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	rw.Header().Set("Cache-Control", "no-store")
	if len(v.problems) > 0 {
		rw.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(rw, "not ready: %s\n", strings.Join(v.problems, "; "))
		return
	}
	fmt.Fprintln(rw, strings.Join(append([]string{"ok"}, v.notes...), "; "))
}

// verdict returns the last verdict if it is recent, else checks again.
func (r *readiness) verdict(ctx context.Context) verdict {
	if r.stop.Err() != nil {
		return verdict{problems: []string{"shutting down"}}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.at.IsZero() && time.Since(r.at) < r.every {
		return r.last
	}
	// Not cut short by a probe that hangs up: the verdict serves the
	// probes that come after it.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
	defer cancel()
	r.last, r.at = r.check(cctx), time.Now()
	return r.last
}

// check asks NATS and Redis at once, each answer awaited until ctx is
// done.
func (r *readiness) check(ctx context.Context) verdict {
	var v verdict
	natsProblem := make(chan string, 1) // buffered: a late answer never blocks
	cons := r.consumer()
	switch {
	case !r.nc.IsConnected():
		natsProblem <- "nats: " + strings.ToLower(r.nc.Status().String())
	case cons == nil:
		natsProblem <- "setting up the streams and consumers"
	default:
		go func() { natsProblem <- consumerProblem(ctx, cons) }()
	}
	redisProblem := make(chan string, 1)
	if r.redis != nil {
		go func() {
			if err := r.redis.Ping(ctx).Err(); err != nil {
				redisProblem <- "redis: " + err.Error()
				return
			}
			redisProblem <- ""
		}()
	} else {
		redisProblem <- ""
	}
	if p := await(ctx, natsProblem, "nats: no answer about the consumer within "+r.timeout.String()); p != "" {
		v.problems = append(v.problems, p)
	}
	p := await(ctx, redisProblem, "redis: no answer to PING within "+r.timeout.String())
	switch {
	case p == "":
	case r.allowRedis:
		v.notes = append(v.notes, p+" (THROTTLER_ON_REDIS_ERROR=allow: jobs run unthrottled)")
	default:
		v.problems = append(v.problems, p)
	}
	return v
}

// consumerProblem reads cons' info from the server and says why it could
// not, or "" when it could.
func consumerProblem(ctx context.Context, cons jetstream.Consumer) string {
	if _, err := cons.Info(ctx); err != nil {
		ci := cons.CachedInfo()
		return fmt.Sprintf("nats: consumer %s of stream %s: %v", ci.Name, ci.Stream, err)
	}
	return ""
}

// await returns what ch gives, or late once ctx is done first.
func await(ctx context.Context, ch <-chan string, late string) string {
	select {
	case p := <-ch:
		return p
	case <-ctx.Done():
		return late
	}
}

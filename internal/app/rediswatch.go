package app

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/internal/outage"
)

// WatchRedis reports the outages of c to log through an outage.Reporter
// (one line when Redis fails, with url, REDIS_URL masked, and the cause,
// a summary every 30 s, one line when it answers again) until ctx ends.
// It sees every command of c through a go-redis hook on this client
// alone: another client of the process is not watched, and the watch is
// no global state. Whoever makes the client watches it, once (the worker
// in cmd/throttler, the demo), however many workers share it. go-redis's
// own log (a line per failed dial, which is what floods the log while
// Redis is down) is process-wide and has no per-client switch;
// cmd/throttler demotes that line to debug (redisLogger), since this
// watch says the same once. A client that takes no hooks is not watched.
func WatchRedis(ctx context.Context, c any, url string, log *slog.Logger) *outage.Reporter {
	r := outage.New(outage.Options{Name: "Redis", Attrs: []any{"url", url}, Log: log})
	h := redisWatchHook{r: r}
	switch c := c.(type) {
	case *redis.ClusterClient:
		// A cluster client runs every command through the client of one
		// node: a hook on those (each made after this) sees each once.
		// While one master is down the others answer, so the cluster is
		// up again only once no node has failed for a while.
		h.nodes = &nodeFailures{quiet: clusterQuiet, now: time.Now}
		c.OnNewNode(func(n *redis.Client) { n.AddHook(h) })
	case interface{ AddHook(redis.Hook) }:
		c.AddHook(h)
	default:
		return r
	}
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				r.Tick()
			}
		}
	}()
	return r
}

// redisWatchHook reports each command's outcome to a Reporter.
type redisWatchHook struct {
	r     *outage.Reporter
	nodes *nodeFailures // a cluster's nodes; nil for one server
}

// clusterQuiet is how long no node of a Redis Cluster must have failed
// before the cluster counts as answering again: a dead master's tenants
// fail until its replica takes over (seconds) while the other masters
// answer, which would otherwise log the outage and its end by turns.
const clusterQuiet = 2 * time.Second

// nodeFailures is when a node of a cluster last failed. Safe for
// concurrent use.
type nodeFailures struct {
	quiet time.Duration
	now   func() time.Time
	mu    sync.Mutex
	last  time.Time
}

// failed records a failure of a node.
func (n *nodeFailures) failed() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.last = n.now()
}

// quietFor reports whether no node has failed for the quiet period.
func (n *nodeFailures) quietFor() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.now().Sub(n.last) >= n.quiet
}

// DialHook implements redis.Hook: dials are seen through the commands
// that needed them.
func (h redisWatchHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h redisWatchHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.nodes != nil && cmd.Name() == "cluster" {
			// The client reading the slot map (CLUSTER SLOTS) tries
			// the nodes it knows, a dead master among them until it
			// forgets it, and goes on to the next: its housekeeping,
			// not Redis failing the worker.
			return err
		}
		h.report(ctx, err)
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h redisWatchHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.report(ctx, err)
		return err
	}
}

// report tells the reporter whether Redis answered.
func (h redisWatchHook) report(ctx context.Context, err error) {
	switch {
	case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		// The caller's deadline passed (or it cancelled) before Redis was
		// asked, most often while the call waited for a connection of a
		// busy pool, as after a burst: that says nothing of Redis. A Redis
		// that does not answer fails on the connection's own timeouts
		// (the client does not take them from contexts), which are net
		// errors, reported below.
	case redisFailed(err):
		if h.nodes != nil {
			h.nodes.failed()
		}
		h.r.Fail(err)
	case h.nodes != nil && !h.nodes.quietFor():
		// Another node failed a moment ago: this one answering does not
		// end the cluster's outage.
	case err == nil || ctx.Err() == nil:
		// An answer, even an error reply, is Redis up; a call the caller
		// cancelled says nothing either way.
		h.r.OK()
	}
}

// redisFailed reports whether err says Redis could not serve the command:
// no connection, a timeout, or a reply saying it cannot serve now. A reply
// such as NOSCRIPT or WRONGTYPE, or redis.Nil, is Redis answering; a
// cancelled call says nothing.
func redisFailed(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, context.Canceled) {
		return false
	}
	var reply redis.Error
	var ne net.Error
	if errors.As(err, &reply) && !errors.As(err, &ne) {
		for _, p := range []string{"LOADING", "MASTERDOWN", "CLUSTERDOWN", "BUSY ", "TRYAGAIN", "NOAUTH", "WRONGPASS"} {
			if strings.HasPrefix(err.Error(), p) {
				return true
			}
		}
		return false
	}
	return true
}

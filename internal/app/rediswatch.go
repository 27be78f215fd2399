package app

import (
	"context"
	"errors"
	"fmt"
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
// a summary every 30 s, one line when it answers again, and a warning
// when it restarted meanwhile: redisRestarts) until ctx ends.
// It sees every command of c through a go-redis hook on this client
// alone: another client of the process is not watched, and the watch is
// no global state. Whoever makes the client watches it, once (the worker
// in cmd/throttler, the demo), however many workers share it. go-redis's
// own log (a line per failed dial, which is what floods the log while
// Redis is down) is process-wide and has no per-client switch;
// cmd/throttler demotes that line to debug (redisLogger), since this
// watch says the same once. A client that takes no hooks is not watched.
//
// A Redis that hangs (its port accepts, nothing answers) is reported once
// no call has been answered for silentPeriod while calls kept ending at
// their deadlines (see silentCalls), and the outage is timed from when
// that silence began.
func WatchRedis(ctx context.Context, c any, url string, log *slog.Logger) *outage.Reporter {
	r := outage.New(outage.Options{Name: "Redis", Attrs: []any{"url", url}, Log: log, Back: redisRestarts(ctx, c, url, log)})
	h := redisWatchHook{r: r}
	switch c := c.(type) {
	case *redis.ClusterClient:
		// A cluster client runs every command through the client of one
		// node: a hook on those (each made after this) sees each once.
		// While one master is down the others answer, so the cluster is
		// up again only once no node has failed for a while. Silence is
		// followed per node: a hung master goes unanswered while the
		// others answer, which would end the silence of one tracker for
		// all.
		h.nodes = &nodeFailures{quiet: clusterQuiet, now: time.Now}
		c.OnNewNode(func(n *redis.Client) {
			nh := h
			nh.silent = newSilentCalls(time.Now)
			n.AddHook(nh)
		})
	case interface{ AddHook(redis.Hook) }:
		h.silent = newSilentCalls(time.Now)
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
	r      *outage.Reporter
	nodes  *nodeFailures // a cluster's nodes; nil for one server
	silent *silentCalls  // the calls of this server (node) left unanswered
}

// silentPeriod is how long calls to a server must have been ending at
// their deadlines, none answered, before it counts as not answering: twice
// THROTTLER_REDIS_TIMEOUT's default, so that one round of calls timing out
// (a burst's waits for a busy pool's connections) is not enough, and a hung
// Redis is reported about 4 s after its first unanswered call, or at that
// call's deadline if it is longer.
const silentPeriod = 4 * time.Second

// errNoAnswer is the failure reported for a Redis that stays silent.
var errNoAnswer = errors.New("redis answered no call within its deadline")

// silentCalls tells a Redis that answers nothing (a hung server: its port
// accepts, no reply comes) from a busy pool. Both end calls with the
// caller's own deadline error: go-redis waits for a pooled connection, and
// sleeps before its retry, inside the process hook and bounded by the
// call's context, and it reads until the context's deadline when that
// comes before its read timeout; so the error the hook sees is ctx.Err()
// either way, and only an odd call surfaces the read's net timeout. In a
// busy pool the calls holding the connections are answered meanwhile; from
// a hung server none is. So calls that keep ending at their deadlines with
// none answered for a period are Redis not answering. (Commands that each
// hold a connection longer than the period, blocking ones, would look the
// same; the worker sends none.) Safe for concurrent use.
type silentCalls struct {
	period time.Duration
	now    func() time.Time

	mu         sync.Mutex
	lastAnswer time.Time // when a call was last answered
	since      time.Time // when the silence began; zero while calls are answered
	lastSilent time.Time // when the last unanswered call ended
}

// newSilentCalls returns a tracker of silentPeriod timed by now.
func newSilentCalls(now func() time.Time) *silentCalls {
	return &silentCalls{period: silentPeriod, now: now}
}

// answered records a call that Redis answered: any silence is over.
func (s *silentCalls) answered() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastAnswer, s.since = s.now(), time.Time{}
}

// silent records a call made at start that ended at its deadline with no
// answer. It returns when the silence began and whether it has lasted the
// period.
func (s *silentCalls) silent(start time.Time) (since time.Time, long bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.since.IsZero() || start.Sub(s.lastSilent) > s.period {
		// The silence began when this call was made, or when the last
		// answer came if later: a call that waited while others were
		// answered was not left unanswered before them. A call made long
		// after the last unanswered one ended starts a silence of its
		// own: an idle worker asked nothing in between, so a missed
		// deadline before and one after are no outage together.
		s.since = start
		if s.lastAnswer.After(start) {
			s.since = s.lastAnswer
		}
	}
	s.lastSilent = now
	return s.since, now.Sub(s.since) >= s.period
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
		start := h.silent.now()
		err := next(ctx, cmd)
		if h.nodes != nil && cmd.Name() == "cluster" {
			// The client reading the slot map (CLUSTER SLOTS) tries
			// the nodes it knows, a dead master among them until it
			// forgets it, and goes on to the next: its housekeeping,
			// not Redis failing the worker.
			return err
		}
		h.report(ctx, start, err)
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h redisWatchHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := h.silent.now()
		err := next(ctx, cmds)
		h.report(ctx, start, err)
		return err
	}
}

// report tells the reporter whether Redis answered a call made at start.
func (h redisWatchHook) report(ctx context.Context, start time.Time, err error) {
	if answered(err) {
		h.silent.answered()
	}
	switch {
	case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		// The caller cancelled, or its deadline passed, most often while
		// the call waited for a connection of a busy pool, as after a
		// burst: one such call says nothing of Redis. But a hung Redis
		// ends calls so too (see silentCalls): calls that keep missing
		// their deadline with none answered are an outage, dated from
		// when the silence began. A cancelled call says nothing.
		if errors.Is(err, context.DeadlineExceeded) {
			h.unanswered(start, err)
		}
	case timedOut(err):
		// The connection's own read (or dial) deadline came first, as it
		// may with a THROTTLER_REDIS_TIMEOUT as short as the read
		// timeout: Redis not answering in time all the same, and a stall
		// shorter than the silent period (a fork, a slow command) is no
		// outage either way. A refused connection is one at once, below.
		h.unanswered(start, err)
	case redisFailed(err):
		h.fail(err, time.Time{})
	case h.nodes != nil && !h.nodes.quietFor():
		// Another node failed a moment ago: this one answering does not
		// end the cluster's outage.
	case err == nil || ctx.Err() == nil:
		// An answer, even an error reply, is Redis up; a call the caller
		// cancelled says nothing either way.
		h.r.OK()
	}
}

// unanswered records a call made at start that Redis did not answer in
// time (err), and reports the outage once calls have gone unanswered for
// the silent period, dated from its start.
func (h redisWatchHook) unanswered(start time.Time, err error) {
	if since, long := h.silent.silent(start); long {
		h.fail(fmt.Errorf("%w for %s: %w", errNoAnswer, h.silent.period, err), since)
	}
}

// timedOut reports whether err is a network deadline's: a read or dial
// that got no answer in time.
func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// fail reports a failure of an outage that began at since at the latest
// (zero: now).
func (h redisWatchHook) fail(err error, since time.Time) {
	if h.nodes != nil {
		h.nodes.failed()
	}
	h.r.FailSince(err, since)
}

// answered reports whether err is Redis's answer to a call: none, redis.Nil
// or an error reply, as opposed to a call that got no reply.
func answered(err error) bool {
	var reply redis.Error
	var ne net.Error
	return err == nil || errors.Is(err, redis.Nil) || (errors.As(err, &reply) && !errors.As(err, &ne))
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

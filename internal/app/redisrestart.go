package app

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// restartCheckTimeout bounds asking Redis how long it has been up.
const restartCheckTimeout = 5 * time.Second

// restartSlack is added to an outage's length when telling a restart
// from a server that was up all along: uptime is counted in whole
// seconds, and the outage from the first failed call.
const restartSlack = 2 * time.Second

// redisRestarts returns what the Redis watch runs once Redis answers
// again after an outage of downFor: it asks each server (each master of a
// cluster) how long it has been up, and logs a warning for one that
// started during the outage. A Redis that restarted without persistence
// lost what the engine kept there: an operator who then sees tenants
// burst, or caps run over, must be able to tell why from the log. A
// client that is neither a single server's nor a cluster's is not asked.
func redisRestarts(ctx context.Context, c any, url string, log *slog.Logger) func(downFor time.Duration) {
	return func(downFor time.Duration) {
		ctx, cancel := context.WithTimeout(ctx, restartCheckTimeout)
		defer cancel()
		check := func(ctx context.Context, n *redis.Client) error {
			checkRestarted(ctx, n, url, downFor, log)
			return nil
		}
		switch c := c.(type) {
		case *redis.ClusterClient:
			_ = c.ForEachMaster(ctx, check)
		case *redis.Client:
			_ = check(ctx, c)
		}
	}
}

// checkRestarted asks n how long it has been up and logs a warning when
// it started within downFor (and restartSlack) of now; a debug line when
// it did not, or could not be asked.
func checkRestarted(ctx context.Context, n *redis.Client, url string, downFor time.Duration, log *slog.Logger) {
	up, err := uptime(ctx, n)
	if err != nil {
		log.Debug("could not ask Redis whether it restarted", "url", url, "node", n.Options().Addr, "err", err)
		return
	}
	if up > downFor+restartSlack {
		log.Debug("Redis answers again without a restart", "url", url, "node", n.Options().Addr, "up_for", up)
		return
	}
	log.Warn("Redis restarted while unreachable: unless it keeps its data (RDB or AOF), what the limits kept there is lost: "+
		"tenants' buckets start full again, reserved slots are decided anew as their jobs come back, running caps' leases and waiting lists are gone",
		"url", url, "node", n.Options().Addr, "up_for", up, "down_for", downFor)
}

// uptime is how long n has been up, from INFO server.
func uptime(ctx context.Context, n *redis.Client) (time.Duration, error) {
	info, err := n.Info(ctx, "server").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO server: %w", err)
	}
	for line := range strings.Lines(info) {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "uptime_in_seconds:")
		if !ok {
			continue
		}
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO server: uptime_in_seconds %q: %w", v, err)
		}
		return time.Duration(s) * time.Second, nil
	}
	return 0, fmt.Errorf("INFO server: no uptime_in_seconds")
}

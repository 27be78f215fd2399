package demo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/redis/go-redis/v9"

	"github.com/throttler/throttler/internal/app"
)

const (
	// natsReadyTimeout bounds how long the embedded NATS server may take to
	// accept connections.
	natsReadyTimeout = 10 * time.Second
	// redisPingTimeout bounds the PING that checks Redis is reachable.
	redisPingTimeout = 3 * time.Second
)

// natsServer is an in-process nats-server with JetStream, storing its data
// in a temporary directory that stop removes.
type natsServer struct {
	srv *server.Server
	dir string
}

// startNATS starts a nats-server with JetStream on a random port of
// 127.0.0.1 and waits until it accepts connections.
func startNATS() (*natsServer, error) {
	dir, err := os.MkdirTemp("", "throttler-demo-nats-")
	if err != nil {
		return nil, fmt.Errorf("create NATS store directory: %w", err)
	}
	srv, err := server.NewServer(&server.Options{
		ServerName: "throttler-demo",
		Host:       "127.0.0.1",
		Port:       -1,
		JetStream:  true,
		StoreDir:   dir,
		NoLog:      true,
		NoSigs:     true,
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("configure embedded NATS server: %w", err), os.RemoveAll(dir))
	}
	n := &natsServer{srv: srv, dir: dir}
	srv.Start()
	if !srv.ReadyForConnections(natsReadyTimeout) {
		return nil, errors.Join(fmt.Errorf("embedded NATS server not ready after %s", natsReadyTimeout), n.stop())
	}
	return n, nil
}

// url returns the client URL of the server.
func (n *natsServer) url() string { return n.srv.ClientURL() }

// stop shuts the server down, waits for it, and removes its store.
func (n *natsServer) stop() error {
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
	if err := os.RemoveAll(n.dir); err != nil {
		return fmt.Errorf("remove NATS store directory: %w", err)
	}
	return nil
}

// connectRedis returns a client for cfg.RedisURL in cfg.RedisMode sized
// for workers workers, after checking that Redis answers PING within
// redisPingTimeout.
func connectRedis(ctx context.Context, cfg *app.Settings, workers int) (redis.UniversalClient, error) {
	pctx, cancel := context.WithTimeout(ctx, redisPingTimeout)
	defer cancel()
	// Dial once before the client does: when nothing listens, the client's
	// pool retries and logs each failure on stderr. The first address is
	// the server, a seed node of the cluster or a sentinel.
	addr := cfg.RedisAddrs[0]
	var d net.Dialer
	conn, err := d.DialContext(pctx, "tcp", addr)
	if err != nil {
		return nil, unreachable(addr, err)
	}
	_ = conn.Close()
	rdb, err := app.NewRedis(cfg.Config, workers)
	if err != nil {
		return nil, err
	}
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, unreachable(addr, err)
	}
	return rdb, nil
}

// unreachable is the error for a Redis at addr that does not answer.
func unreachable(addr string, err error) error {
	return fmt.Errorf("REDIS_URL is unreachable: no answer from Redis at %s: %w\n"+
		"start a Redis server there, point REDIS_URL at one, or run scripts/demo.sh, "+
		"which starts a private redis-server and runs the demo against it", addr, err)
}

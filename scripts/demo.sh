#!/usr/bin/env bash
# Runs the throttler demo against a private, throw-away redis-server:
#   scripts/demo.sh [demo args]
#
# Installs redis-server with apt-get if missing, starts it on a free port of
# 127.0.0.1 (no persistence), runs `go run ./cmd/throttler demo "$@"` with
# REDIS_URL pointing at it, and kills it on exit.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/deps.sh
source scripts/deps.sh

ensure_redis

# free_port prints a TCP port on 127.0.0.1 that is currently free.
free_port() {
	local port
	for _ in $(seq 1 100); do
		port=$((20000 + RANDOM % 30000))
		# A connection that fails means nothing listens there.
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return 0
		fi
	done
	echo "error: no free port found" >&2
	return 1
}

tmp="$(mktemp -d)"
redis_pid=""
cleanup() {
	if [ -n "$redis_pid" ]; then
		kill "$redis_pid" 2>/dev/null || true
		wait "$redis_pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

port="$(free_port)"
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
	--daemonize no --dir "$tmp" --logfile "$tmp/redis.log" &
redis_pid=$!

deadline=$((SECONDS + 10))
until [ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = "PONG" ]; do
	if ! kill -0 "$redis_pid" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; then
		echo "error: redis-server on port $port did not start; log:" >&2
		tail -n 20 "$tmp/redis.log" >&2 || true
		exit 1
	fi
	sleep 0.1
done
echo "redis-server running on 127.0.0.1:$port (pid $redis_pid)"

REDIS_URL="redis://127.0.0.1:$port" go run ./cmd/throttler demo "$@"

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

# go run compiles first, silently: the first time on a machine it takes a
# minute or so, later runs a few seconds. Say so before anything else.
echo "throttler demo: building the worker first (go run; the first build takes a while), then running it"
ensure_redis

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

# start_redis starts redis-server on a free port and waits for it to answer;
# it fails if the server exits (a port taken meanwhile) or stays silent.
start_redis() {
	port="$(free_port)"
	redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
		--daemonize no --dir "$tmp" --logfile "$tmp/redis.log" &
	redis_pid=$!
	local deadline=$((SECONDS + 10))
	until [ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = "PONG" ]; do
		if ! kill -0 "$redis_pid" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; then
			kill "$redis_pid" 2>/dev/null || true
			wait "$redis_pid" 2>/dev/null || true
			redis_pid=""
			return 1
		fi
		sleep 0.1
	done
}

started=""
for _ in 1 2 3 4 5; do
	if start_redis; then
		started=1
		break
	fi
done
if [ -z "$started" ]; then
	echo "error: redis-server did not start on a free port; last log:" >&2
	tail -n 20 "$tmp/redis.log" >&2 || true
	exit 1
fi
echo "redis-server running on 127.0.0.1:$port (pid $redis_pid)"

REDIS_URL="redis://127.0.0.1:$port" go run ./cmd/throttler demo "$@"

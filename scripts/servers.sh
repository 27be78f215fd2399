#!/usr/bin/env bash
# Starts the servers the worker needs, for trying it on one machine:
#   scripts/servers.sh [-nats-port N] [-redis-port N]
#
# - nats-server with JetStream, built from the nats-server module go.mod
#   pins (2.12 or later: the worker's message schedules need it; the
#   distributions ship older ones), its store in a temporary directory;
# - redis-server (installed with apt-get if missing), no persistence.
# Both listen on 127.0.0.1, on free ports unless given. It prints the
# variables that point the worker and its commands at them, then waits:
# Ctrl-C (or SIGTERM) stops both and removes their data.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/deps.sh
source scripts/deps.sh

nats_port=""
redis_port=""
while [ "$#" -gt 0 ]; do
	case "$1" in
	-nats-port | --nats-port) nats_port="${2:?-nats-port needs a port}"; shift 2 ;;
	-redis-port | --redis-port) redis_port="${2:?-redis-port needs a port}"; shift 2 ;;
	-h | --help) sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "scripts/servers.sh: unknown argument $1 (want -nats-port N, -redis-port N)" >&2; exit 2 ;;
	esac
done

tmp="$(mktemp -d)"
nats_pid=""
redis_pid=""
cleanup() {
	for pid in $nats_pid $redis_pid; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in $nats_pid $redis_pid; do
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo; echo "stopping the servers"; exit 0' INT TERM

ensure_redis >&2

# The nats-server go.mod pins: the module cache holds it (go mod download
# fetches it once, when missing), and it builds in seconds.
nats_version="$(go list -m -f '{{.Version}}' github.com/nats-io/nats-server/v2)"
echo "building nats-server $nats_version from the module go.mod pins" >&2
go build -o "$tmp/nats-server" github.com/nats-io/nats-server/v2

# wait_port PID PORT LOG waits until something answers on 127.0.0.1:PORT;
# it fails if PID exits first (a port taken) or after 10 s.
wait_port() {
	local deadline=$((SECONDS + 10))
	until (exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null; do
		if ! kill -0 "$1" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; then
			echo "error: the server did not start on port $2; last lines of its log:" >&2
			tail -n 20 "$3" >&2 || true
			return 1
		fi
		sleep 0.1
	done
}

nats_port="${nats_port:-$(free_port)}"
mkdir -p "$tmp/nats"
"$tmp/nats-server" -a 127.0.0.1 -p "$nats_port" -js -sd "$tmp/nats" -n throttler-dev -l "$tmp/nats.log" &
nats_pid=$!
wait_port "$nats_pid" "$nats_port" "$tmp/nats.log"

redis_port="${redis_port:-$(free_port)}"
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
	--daemonize no --dir "$tmp" --logfile "$tmp/redis.log" &
redis_pid=$!
wait_port "$redis_pid" "$redis_port" "$tmp/redis.log"

cat <<END
nats-server $nats_version, JetStream on, on 127.0.0.1:$nats_port (store $tmp/nats, log $tmp/nats.log)
redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on 127.0.0.1:$redis_port (no persistence)

In the terminals that run throttler:
export NATS_URL=nats://127.0.0.1:$nats_port
export REDIS_URL=redis://127.0.0.1:$redis_port

Ctrl-C here stops both servers and removes their data.
END

# Wait for either server to exit (or for Ctrl-C).
wait -n "$nats_pid" "$redis_pid" || true
echo "error: a server exited; its log:" >&2
tail -n 20 "$tmp/nats.log" "$tmp/redis.log" >&2 || true
exit 1

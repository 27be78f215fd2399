#!/usr/bin/env bash
# Runs the test suite with the race detector: scripts/test.sh [go test args]
#
# Installs redis-server/redis-cli, Debian's nats-server (for the test of
# servers without message schedules) and a C compiler for -race with apt-get
# if missing; the tests start their own Redis and NATS servers on free ports.
# Extra arguments replace the default package pattern ./..., e.g.
#   scripts/test.sh ./internal/testenv/ -run Redis -v
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/deps.sh
source scripts/deps.sh

ensure_redis
ensure_nats_server
ensure_cc
export CGO_ENABLED=1

if [ "$#" -eq 0 ]; then
	set -- ./...
fi
go test -race -count=1 -timeout 20m "$@"

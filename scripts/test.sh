#!/usr/bin/env bash
# Runs the test suite with the race detector: scripts/test.sh [go test args]
#
# Installs redis-server/redis-cli, Debian's nats-server (for the test of
# servers without message schedules), Debian's prometheus and promtool (for
# deploy/'s tests of the rules and dashboard against a real Prometheus),
# Debian's chromium (for the console's browser tests) and a C compiler for
# -race with apt-get if missing; the tests start their own Redis, NATS and
# Prometheus servers on free ports.
# Without arguments it runs the worker's module and then deploy/'s; extra
# arguments replace that with go test in the worker's module, e.g.
#   scripts/test.sh ./internal/testenv/ -run Redis -v
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/deps.sh
source scripts/deps.sh

ensure_redis
ensure_nats_server
ensure_prometheus
ensure_chromium
ensure_cc
export CGO_ENABLED=1

if [ "$#" -gt 0 ]; then
	exec go test -race -count=1 -timeout 20m "$@"
fi
status=0
go test -race -count=1 -timeout 20m ./... || status=$?
# deploy/ is a module of its own (its tests need k8s.io/api and
# Prometheus, which the worker's module does not take): its manifests,
# rules and dashboard checked against a running worker. Run even when
# the worker's tests failed, so one run reports both.
(cd deploy && go test -race -count=1 -timeout 10m ./...) || status=$?
exit "$status"

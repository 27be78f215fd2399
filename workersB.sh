#!/bin/bash
# usage: workersB.sh SCEN N: like workers.sh, against the second NATS and Redis DB 2, metrics on 3145N
cd /work/wt/bb28
S=$1; N=${2:-1}
export NATS_URL=nats://127.0.0.1:31438 REDIS_URL=redis://127.0.0.1:31429/2 THROTTLER_HANDLER=http
export THROTTLER_HTTP_URL=${THROTTLER_HTTP_URL:-http://127.0.0.1:31430/$S/{tenant}}
: > pids.$S
for i in $(seq 1 $N); do
  THROTTLER_METRICS_ADDR=127.0.0.1:3145$i nohup ./throttler > logs/w$i-$S.log 2>&1 &
  echo $! >> pids.$S
done

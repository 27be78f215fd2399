#!/usr/bin/env bash
# lua-instructions.sh: instructions redis-server executes per call of the
# engine's decide function (FCALL), counted by valgrind's callgrind. Each
# line gives the count per call less the library's load (a run that loads
# it and calls nothing: Redis loads a library once, not per job), the same
# with the load spread over the calls, and the count beyond an empty
# function's call with the same keys and arguments.
# Unlike timings, the count is the same from run to run whatever else the
# machine is doing.
#
#   scripts/lua-instructions.sh [library.lua ...]   (default: the engine's, lua/*.lua joined)
#   scripts/lua-instructions.sh --redis-rate
#   scripts/lua-instructions.sh --batch [library.lua ...]
#   scripts/lua-instructions.sh --reserve [library.lua ...]
#   scripts/lua-instructions.sh --sliding [library.lua ...]
#   scripts/lua-instructions.sh --credits [library.lua ...]
#
# The engine's library is lua/'s source files joined in the order
# lua/lua.go gives them, as lua.Library is; a library named instead is
# one file. A library is loaded with FUNCTION LOAD, its version placeholder
# __VERSION__ replaced by "x" and each bound's placeholder by its value in
# lua/lua.go (as package lua does), and its decide_x called 3,000 times, as
# Limiter.Allow calls it: one job, one limit of 10,000/s with a burst of
# 10,000 (as the Go benchmarks use), Redis TIME, keys spread over 1,000
# tenants. --redis-rate measures instead the allowN script (EVALSHA) of
# github.com/go-redis/redis_rate/v10 (read from the module cache, not kept
# here) as its Allow calls it, with PerSecond(10,000); its empty script is
# an EVAL script too. (At
# 10^9/s redis_rate's increment is lost to float rounding and it writes
# nothing, so it would be measured doing a GET only.) --batch counts instead 300 calls of 62 jobs each, as the
# worker makes them for a pulled group: 62 tenants, one limit each, every
# job fresh with its reservation, owner and shift keys, and reports the count per
# job. --reserve counts 300 calls of 64 fresh jobs of one tenant far over
# its limit (100/s, burst 10), each given a slot: a flood being moved off
# the consumer. --sliding counts 3,000 lone calls of one job as Allow sends
# them for a sliding window (throttle/call.go): under sliding:10000/1s
# alone (the short form, burst 'w'), keys spread over 1,000 tenants; the
# same with every call on one tenant, whose window then holds the
# admissions of the last second (each call adds one and drops those that
# left the span); and, for one tenant, under 10000/s:10000 alone and
# with sliding:10000/1s (the general form, no job id). --credits counts
# the credits function (lua/credits.lua) instead, against one tenant's
# trusted balance of 10^12 set first with the balance function: 3,000
# lone calls of one job charged (a new job id each, drawn from 10^9), the
# same job paid already, and 300 calls of 64 jobs each charged, per job.
# valgrind slows Redis to well under
# 10,000 calls a second, so every job is admitted. Needs valgrind, redis-server and redis-benchmark (Debian:
# valgrind, redis-server, redis-tools), and Redis 7.0 or later.
set -euo pipefail
cd "$(dirname "$0")/.."

calls=3000
port=$((20000 + RANDOM % 20000))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
args=(1 'thr:{t__rand_int__}:l:1000000' 0 1 10000 1000000 10000)

# bounds is the sed program that puts lua/lua.go's bounds (MaxJobs = 64,
# ...) in for their placeholders (__MAX_JOBS__, ...), as lua.Source does.
bounds=$(sed -n 's/^\tMax\([A-Z][a-z]*\) *= *\([0-9][0-9]*\)$/\1 \2/p' lua/lua.go |
	while read -r name value; do
		echo "s/__MAX_$(echo "$name" | tr '[:lower:]' '[:upper:]')__/$value/g;"
	done)

# instructions FILE N: total instructions of a redis-server that ran FILE N
# times: a library with FCALL, or with $eval set a script with EVALSHA.
eval=
fn=decide_x
range=1000
instructions() {
	local out="$work/callgrind.out"
	valgrind --tool=callgrind --callgrind-out-file="$out" \
		redis-server --port "$port" --save '' --appendonly no >"$work/valgrind.log" 2>&1 &
	local pid=$!
	for _ in $(seq 100); do
		redis-cli -p "$port" ping >/dev/null 2>&1 && break
		sleep 0.2
	done
	local call
	if [ -n "$eval" ]; then
		call=(EVALSHA "$(redis-cli -p "$port" SCRIPT LOAD "$(cat "$1")")")
	else
		# From stdin (-x): the library is longer than one argument may be
		# (128 KiB).
		sed "s/__VERSION__/x/g;$bounds" "$1" | redis-cli -p "$port" -x FUNCTION LOAD >/dev/null
		call=(FCALL "$fn")
		if [ -n "${prep:-}" ]; then
			# shellcheck disable=SC2086 # prep is words, split on purpose
			redis-cli -p "$port" $prep >/dev/null 2>&1 || true
		fi
	fi
	if [ "$2" -gt 0 ]; then
		redis-benchmark -p "$port" -n "$2" -c 1 -r "$range" -q "${call[@]}" "${args[@]}" >/dev/null
	fi
	redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
	wait "$pid" || true
	awk '/^(summary|totals):/ {print $2; exit}' "$out"
}

if [ "${1:-}" = --redis-rate ]; then
	dir=$(go list -m -f '{{.Dir}}' github.com/go-redis/redis_rate/v10)
	awk '/^var allowN = redis.NewScript\(`/ {on=1; next} on && /^`\)/ {exit} on' "$dir/lua.go" >"$work/redis_rate_allowN.lua"
	args=(1 'rate:{t__rand_int__}' 10000 10000 1 1)
	eval=1
	set -- "$work/redis_rate_allowN.lua"
fi

per=1
unit=call
# worker_call N PATTERN RATE BURST sets the arguments of a worker's call of
# N fresh jobs, job i of tenant $(printf PATTERN i), each with its
# reservation and owner keys and its tenant's shift key (K = 3, SHIFT in
# lua/head.lua), all under one limit of RATE/s with burst BURST.
worker_call() {
	local n=$1 pattern=$2 rate=$3 burst=$4 i t
	calls=300
	per=$n
	unit=job
	keys=() rest=()
	for i in $(seq 0 $((n - 1))); do
		# shellcheck disable=SC2059 # the pattern is the caller's
		t=$(printf "$pattern" "$i")
		keys+=("thr:{$t}:l:1000000" "thr:{$t}:j:$((1000 + i))" "thr:{$t}:o:$((1000 + i))" "thr:{$t}:sh")
		[ "$i" -eq 0 ] || rest+=(1 0 1 0) # cost, incarnation, fresh, L_k = 0: the limit of the job before
	done
	args=($((4 * n)) "${keys[@]}" 0 3600000000 1 0 1 1 "$rate" 1000000 "$burst" "${rest[@]}")
}
case "${1:-}" in
--batch)
	shift
	worker_call 62 'tenant-%03d' 1000000000 1000000000
	;;
--reserve)
	shift
	worker_call 64 'flood' 100 10
	;;
--sliding)
	shift
	sliding=1
	;;
--credits)
	shift
	credits=1
	;;
esac

if [ -n "$eval" ]; then
	echo 'return {1, 0, 0, 0}' >"$work/empty.lua"
else
	printf '%s\n' '#!lua name=empty' "redis.register_function('$fn', function() return {1, 0, 0, 0} end)" >"$work/empty.lua"
fi
if [ $# -eq 0 ]; then
	# The files lua/lua.go's files() lists, in its order.
	sed -n 's/^\t\t{"\([a-z]*\.lua\)", [a-z]*},$/lua\/\1/p' lua/lua.go >"$work/files"
	[ -s "$work/files" ] || { echo "no source files found in lua/lua.go" >&2; exit 1; }
	xargs cat <"$work/files" >"$work/library.lua"
	set -- "$work/library.lua"
fi
# measure [LABEL]: counts the libraries named with the arguments in args,
# against an empty function called with the same.
measure() {
	local base0 empty loaded total name f
	base0=$(instructions "$work/empty.lua" 0)
	empty=$(instructions "$work/empty.lua" "$calls")
	for f in "${libs[@]}"; do
		loaded=$(instructions "$f" 0)
		total=$(instructions "$f" "$calls")
		name=$f
		[ "$f" != "$work/library.lua" ] || name='lua/*.lua (joined)'
		echo "$name${1:+ $1}: $(((total - loaded) / calls / per)) instructions per $unit, $(((total - base0) / calls / per)) with the library's load spread over the calls, $(((total - empty - loaded + base0) / calls / per)) more than an empty script"
	done
}
libs=("$@")
if [ -n "${credits:-}" ]; then
	fn=credits_x
	printf '%s\n' '#!lua name=empty' "redis.register_function('$fn', function() return {1, 0, 0, 0} end)" >"$work/empty.lua"
	prep="FCALL balance_x 1 thr:{t}:c 3 0 1000000000000 0"
	range=1000000000
	args=(2 'thr:{t}:c' 'thr:{t}:cp:__rand_int__' 0 3600000 1 0 0 4)
	measure 'credits, one job charged'
	args=(2 'thr:{t}:c' 'thr:{t}:cp:1' 0 3600000 1 0 0 4)
	measure 'credits, one job paid already'
	keys=() rest=()
	for i in $(seq 64); do
		keys+=("thr:{t}:cp:__rand_int__-$i")
		rest+=(1 "$i" "$i" 4)
	done
	calls=300 per=64 unit=job
	args=(65 'thr:{t}:c' "${keys[@]}" 0 3600000 "${rest[@]}")
	measure 'credits, 64 jobs charged'
	exit 0
fi
if [ -z "${sliding:-}" ]; then
	measure
	exit 0
fi
args=(1 'thr:{t__rand_int__}:z:1000000' 0 1 10000 1000000 w)
measure 'sliding:10000/1s, 1,000 tenants'
args=(1 'thr:{t}:z:1000000' 0 1 10000 1000000 w)
measure 'sliding:10000/1s, one tenant'
# redis-benchmark draws each __rand_int__ apart: a bucket and window of
# one tenant are of one named tenant.
args=(1 'thr:{t}:l:1000000' 0 1 10000 1000000 10000)
measure '10000/s:10000, one tenant'
args=(2 'thr:{t}:l:1000000' 'thr:{t}:z:1000000' 0 3600000000 1 0 0 2 10000 1000000 10000 10000 1000000 w)
measure '10000/s:10000 + sliding:10000/1s, one tenant'

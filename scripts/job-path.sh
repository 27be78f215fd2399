#!/usr/bin/env bash
# Lists, for each outcome of a decided job (ack, deferral, dead letter),
# the files of the module whose code runs from the job's decision to its
# settlement, and fails when one enters more than 8.
#   scripts/job-path.sh
# It runs consumer's TestJobPath (build tag jobpath) twice an outcome with
# coverage counts, stopped when the job is decided and when it is settled;
# a file counts when one of its blocks ran more often in the second run
# (the test's own helpers, internal/testenv, aside).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
max=8
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
for outcome in ack deferral dead-letter; do
	for stage in decided settled; do
		JOB_PATH_OUTCOME=$outcome JOB_PATH_STAGE=$stage go test -tags jobpath -count=1 -run '^TestJobPath$' \
			-covermode=count -coverpkg=./... -coverprofile="$tmp/$stage.out" ./consumer/ >"$tmp/$stage.log" 2>&1 ||
			{ cat "$tmp/$stage.log"; exit 1; }
	done
	files=$(awk 'FNR == 1 { next }
		FILENAME ~ /decided/ { before[$1] = $3; next }
		$3 > before[$1] + 0 { split($1, p, ":"); sub("github.com/throttler/throttler/", "", p[1]); print p[1] }' \
		"$tmp/decided.out" "$tmp/settled.out" | grep -v '^internal/testenv/' | sort -u)
	n=$(printf '%s\n' "$files" | grep -c .)
	printf '%-12s %d files: %s\n' "$outcome" "$n" "$(printf '%s ' $files)"
	if [ "$n" -gt "$max" ]; then
		echo "  more than $max"
		status=1
	fi
done
exit "$status"

#!/usr/bin/env bash
# bench/cachegrind.sh for package usage: instructions per operation of its
# benchmarks under cachegrind,
# for two commits side by side: deterministic, so a loaded machine still
# gives comparable figures (time would not be). For each case and binary,
# the 'I refs' of runs of N and 3N iterations; per op = (I(3N) - I(N)) / 2N,
# which cancels the binary's start-up. Runs valgrind aborts (an unrecognised
# rdtscp in the Go runtime) are repeated, up to 20 times.
#   BEFORE=<commit> AFTER=<commit or empty for the work tree> N=20000 \
#     bash bench/cachegrind-usage.sh ScanJSON1KB ScanJSON1KBFloor > bench/X-instructions.txt
set -euo pipefail
cd "$(dirname "$0")/.."
BEFORE=${BEFORE:?set BEFORE to a commit}
N=${N:-20000}
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/before" >/dev/null 2>&1 || true; git worktree remove --force "$tmp/after" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git worktree add --detach -q "$tmp/before" "$BEFORE"
(cd "$tmp/before" && GOWORK=off go test -c -o "$tmp/before.test" ./usage)
if [ -n "${AFTER:-}" ]; then
	git worktree add --detach -q "$tmp/after" "$AFTER"
	(cd "$tmp/after" && GOWORK=off go test -c -o "$tmp/after.test" ./usage)
	after=$(git rev-parse --short "$AFTER")
else
	GOWORK=off go test -c -o "$tmp/after.test" ./usage
	after="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- usage internal || echo ' + uncommitted changes')"
fi
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(go version); instructions per operation under cachegrind (valgrind --tool=cachegrind --cache-sim=no), GOMAXPROCS=1 GOGC=off; usage test binaries: before = $(git rev-parse --short "$BEFORE"), after = $after; per op = (I(3N) - I(N)) / 2N, N=$N"
irefs() { # binary case n
	for try in $(seq 20); do
		if out=$(cd usage && GOMAXPROCS=1 GOGC=off valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null "$1" -test.run '^$' -test.bench "^Benchmark$2\$" -test.benchtime "$3x" 2>&1); then
			echo "$out" | sed -n 's/.*I *refs: *\([0-9,]*\).*/\1/p' | tr -d , && return 0
		fi
	done
	echo "valgrind failed 20 times on $1 $2" >&2
	return 1
}
for c in "$@"; do
	for bin in before after; do
		# -test.list lists top-level benchmarks only: a sub-benchmark case
		# (BodyEstimate/both/1KB) is listed by its top-level name.
		if ! "$tmp/$bin.test" -test.list "^Benchmark${c%%/*}\$" | grep -q .; then
			echo "$bin $c absent"
			continue
		fi
		i1=$(irefs "$tmp/$bin.test" "$c" "$N")
		i3=$(irefs "$tmp/$bin.test" "$c" $((3 * N)))
		echo "$bin $c I($N)=$i1 I($((3 * N)))=$i3 per-op=$(echo "scale=1; ($i3 - $i1) / (2 * $N)" | bc)"
	done
done

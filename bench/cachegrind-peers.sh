#!/usr/bin/env bash
# bench/cachegrind.sh for bench/'s BenchmarkMiddleware: instructions per
# request of the whole middleware and its peers (bench/peers_test.go), for
# two commits, under cachegrind; per op = (I(3N) - I(N)) / 2N.
#   BEFORE=<commit> N=5000 bash bench/cachegrind-peers.sh llmrate-4buckets+usage throttled > bench/X.txt
set -euo pipefail
cd "$(dirname "$0")/.."
BEFORE=${BEFORE:?set BEFORE to a commit}
N=${N:-5000}
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/before" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git worktree add --detach -q "$tmp/before" "$BEFORE"
(cd "$tmp/before/bench" && GOWORK=off go test -c -o "$tmp/before.test" .)
(cd bench && GOWORK=off go test -c -o "$tmp/after.test" .)
after="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- usage internal || echo ' + uncommitted changes')"
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(go version); instructions per request under cachegrind (valgrind --tool=cachegrind --cache-sim=no), GOMAXPROCS=1 GOGC=off; bench/ test binaries: before = $(git rev-parse --short "$BEFORE"), after = $after; per op = (I(3N) - I(N)) / 2N, N=$N"
irefs() { # binary case n
	for try in $(seq 20); do
		if out=$(cd bench && GOMAXPROCS=1 GOGC=off valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null "$1" -test.run '^$' -test.bench "^BenchmarkMiddleware/$2\$" -test.benchtime "$3x" 2>&1); then
			echo "$out" | sed -n 's/.*I *refs: *\([0-9,]*\).*/\1/p' | tr -d , && return 0
		fi
	done
	echo "valgrind failed 20 times on $1 $2" >&2
	return 1
}
for c in "$@"; do
	re=$(printf '%s' "$c" | sed 's/+/\\+/g')
	for bin in before after; do
		i1=$(irefs "$tmp/$bin.test" "$re" "$N")
		i3=$(irefs "$tmp/$bin.test" "$re" $((3 * N)))
		echo "$bin $c I($N)=$i1 I($((3 * N)))=$i3 per-op=$(echo "scale=1; ($i3 - $i1) / (2 * $N)" | bc)"
	done
done

#!/usr/bin/env bash
# Issue 44's memory-store bullet, timed: the whole middleware on a 1 KB
# OpenAI JSON body against throttled (bench/peers_test.go's
# BenchmarkMiddleware), and package usage's scan of that body and of the
# 64 KB one against one bytes.IndexByte pass over the same bytes (the
# floor), for two commits, rounds alternating before and after, so a
# machine's drift falls on both. Times on a shared machine move; the
# instruction counts (bench/cachegrind-usage.sh) are the figures to trust.
#   BEFORE=<commit> ROUNDS=3 BENCHTIME=1s bash bench/scan-ab.sh > bench/X.txt
set -euo pipefail
cd "$(dirname "$0")/.."
BEFORE=${BEFORE:?set BEFORE to a commit}
ROUNDS=${ROUNDS:-3}
BENCHTIME=${BENCHTIME:-1s}
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/before" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git worktree add --detach -q "$tmp/before" "$BEFORE"
build() { # tree out
	(cd "$1/bench" && GOWORK=off go test -c -o "$2.bench.test" .)
	(cd "$1/usage" && GOWORK=off go test -c -o "$2.usage.test" .)
}
build "$tmp/before" "$tmp/before"
build "$PWD" "$tmp/after"
after="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- usage internal || echo ' + uncommitted changes')"
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(go version) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); before = $(git rev-parse --short "$BEFORE"), after = $after; -benchtime $BENCHTIME, $ROUNDS rounds, before and after alternating"
for r in $(seq "$ROUNDS"); do
	for bin in before after; do
		echo "## round $r $bin (load $(cut -d' ' -f1 /proc/loadavg))"
		(cd bench && "$tmp/$bin.bench.test" -test.run '^$' -test.bench 'BenchmarkMiddleware/(bare-handler|llmrate-4buckets\+usage|llmrate-4buckets-nousage|throttled)$' -test.benchtime "$BENCHTIME" -test.benchmem) | grep '^Benchmark'
		(cd usage && "$tmp/$bin.usage.test" -test.run '^$' -test.bench '^BenchmarkScanJSON(1KB|1KBFloor|Large|LargeFloor)$' -test.benchtime "$BENCHTIME" -test.benchmem) | grep '^Benchmark' || echo "(no usage benchmarks in $bin)"
	done
done

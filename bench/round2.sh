#!/usr/bin/env bash
# Issue 22's interleaved runs: the bench/ test binaries of BEFORE (a commit,
# default f09dfa6, the code before the round) and of the working tree,
# alternating, ROUNDS rounds (default 5), each binary running the same
# benchmarks in every round, so that the machine's drift hits both alike.
#   BENCHTIME=1s bash bench/round2.sh scaling > bench/scaling-round2.txt
#   bash bench/round2.sh hot > bench/hot-round2.txt
#   bash bench/round2.sh middleware > bench/middleware-round2.txt
#   bash bench/round2.sh redis > bench/redis-round2.txt
# redis1 is redis's llmrate case at one goroutine only; redis1t adds that
# case at the default timeouts (a BEFORE without it needs SAME_HARNESS).
# PIN=<cpu> runs each
# binary (and the redis-server it starts) on that one CPU with
# GOMAXPROCS=1: a diagnostic, not the benchmark of record; with nothing
# to wait on across cores, the client's own CPU per admission shows
# through the scheduling noise of two cores.
# SAME_HARNESS=1 builds BEFORE's binary with the working tree's Redis
# benchmark files (middleware_redis_test.go, redis_test.go: the warm-up
# and the latency record, in its timed loop, of issue 30), the stores'
# Hedges read as 0 where BEFORE has none: the two binaries then differ in
# the library alone.
set -euo pipefail
export GOWORK=off
cd "$(dirname "$0")/.."
what=$1
BEFORE=${BEFORE:-f09dfa6}
ROUNDS=${ROUNDS:-5}
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/before" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git worktree add --detach -q "$tmp/before" "$BEFORE"
stub=""
if [ -n "${SAME_HARNESS:-}" ]; then
	cp bench/middleware_redis_test.go bench/redis_test.go "$tmp/before/bench/"
	if ! grep -q 'func (s \*Store) Hedges' "$tmp/before/redisstore/"*.go; then
		# BEFORE has no Hedges: its hedges/1k-op column is a stub's 0,
		# not a count (the header says so).
		stub="; its Hedges stubbed as 0 (BEFORE has none): its hedges/1k-op column is no count"
		sed -i 's/append(hedges, current.Hedges)/append(hedges, func() int64 { return 0 })/' "$tmp/before/bench/middleware_redis_test.go"
		sed -i 's/runAdmissions(b, c, g, run, store.Hedges, batched.Hedges)/runAdmissions(b, c, g, run)/' "$tmp/before/bench/redis_test.go"
		if grep -q 'current.Hedges' "$tmp/before/bench/middleware_redis_test.go" || grep -q 'store.Hedges' "$tmp/before/bench/redis_test.go"; then
			echo "round2.sh: SAME_HARNESS could not stub Hedges out of the benchmark files" >&2
			exit 1
		fi
	fi
elif [ "$what" = redis1t ] && ! grep -q 'default-timeouts' "$tmp/before/bench/middleware_redis_test.go"; then
	echo "round2.sh: $BEFORE's benchmark files have no default-timeouts case: use SAME_HARNESS=1" >&2
	exit 2
fi
(cd "$tmp/before/bench" && go test -c -o "$tmp/before.test" .)
(cd bench && go test -c -o "$tmp/after.test" .)
case $what in
scaling) args=(-test.bench 'Decision/(llmrate-4buckets-(default|separate)|go-limiter|x-time-rate-map)/100k' -test.cpu 1,2 -test.benchtime "${BENCHTIME:-300ms}") ;;
hot) args=(-test.bench 'Decision/(llmrate-4buckets-(default|separate)|go-limiter)/hot' -test.cpu 2 -test.benchtime "${BENCHTIME:-300ms}") ;;
middleware) args=(-test.bench '^BenchmarkMiddleware$' -test.benchtime 300ms -test.benchmem) ;;
redis) args=(-test.bench '^BenchmarkMiddlewareRedis$/^distinct$/^(llmrate-middleware-direct|redis_rate)$' -test.benchtime "${OPS:-5000}x" -test.benchmem) ;;
redis1) args=(-test.bench '^BenchmarkMiddlewareRedis$/^distinct$/^llmrate-middleware-direct$/^goroutines=1$' -test.benchtime "${OPS:-10000}x" -test.benchmem) ;;
redis1t) args=(-test.bench '^BenchmarkMiddlewareRedis$/^distinct$/^llmrate-middleware-direct(-default-timeouts)?$/^goroutines=1$' -test.benchtime "${OPS:-10000}x" -test.benchmem) ;;
redisstore) args=(-test.bench '^BenchmarkRedis$/^(llmrate-4buckets-default-unbatched|llmrate-4buckets-default-unbatched-id|redis_rate)$' -test.benchtime 5000x) ;;
*) echo "usage: $0 scaling|hot|middleware|redis|redis1|redis1t|redisstore" >&2; exit 2 ;;
esac
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(go version) $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
pin=()
if [ -n "${PIN:-}" ]; then
	pin=(env GOMAXPROCS=1 taskset -c "$PIN")
fi
echo "# before = bench test binary of $BEFORE${SAME_HARNESS:+ (built with the Redis benchmark files of the working tree: SAME_HARNESS$stub)}, after = of $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo ' + uncommitted changes'); each round runs both with: ${pin[*]} ${args[*]}"
for r in $(seq "$ROUNDS"); do
	for bin in before after; do
		echo "# round $r: $bin"
		(cd bench && "${pin[@]}" "$tmp/$bin.test" -test.run '^$' "${args[@]}" | grep -E '^Benchmark')
	done
done
echo "# end $(date -u +%Y-%m-%dT%H:%MZ); load: $(cut -d' ' -f1-3 /proc/loadavg)"

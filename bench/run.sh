#!/usr/bin/env bash
# Runs every benchmark of llmrate and its peers in one go, in a format
# benchstat reads:  bash bench/run.sh > new.txt; benchstat old.txt new.txt
# COUNT and BENCHTIME tune the run (defaults keep it to a few minutes on 2 cores).
set -euo pipefail
export GOWORK=off # bench/ is its own module, outside go.work
cd "$(dirname "$0")/.."
COUNT=${COUNT:-3}
BENCHTIME=${BENCHTIME:-300ms}
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(go version) $(nproc) cores"
echo "# llmrate core: admission, middleware, model from body (root module)"
GOWORK= go test -run '^$' -bench 'Admit|Middleware|Bare|Observer|ModelFromBody' -benchtime "$BENCHTIME" -count "$COUNT" .
echo "# usage scanning and decoding (package usage)"
GOWORK= go test -run '^$' -bench '^Benchmark(Scan(SSE|SSEFullParse|SSEEncodingJSON|JSON|JSONEncodingJSON|JSONLarge|JSONLargeEncodingJSON|Encoded)|DecoderAlone)$' -benchtime "$BENCHTIME" -count "$COUNT" ./usage
echo "# side by side with the peers (bench module)"
(cd bench && go test -run '^$' -bench '^Benchmark(Decision|Middleware)$' -benchtime "$BENCHTIME" -count "$COUNT" .)
(cd bench && go test -run '^$' -bench 'MemoryPerKey' -benchtime 1x -count 1 .)
(cd bench && go test -run '^$' -bench '^BenchmarkRedis$' -benchtime 5000x -count "$COUNT" .)
# the whole middleware on Redis vs redis_rate and INCR, and leases on a hot key
(cd bench && go test -run '^$' -bench '^BenchmarkMiddlewareRedis$' -benchtime 5000x -count "$COUNT" .)

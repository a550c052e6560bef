#!/usr/bin/env bash
# turns.sh ROUNDS OPS NAME=BINARY ...: bench test binaries built
# beforehand (go test -c in bench/ at the code to compare), run in turn,
# ROUNDS rounds, each the one-goroutine llmrate case of
# BenchmarkMiddlewareRedis for OPS admissions; PIN=<cpu> runs each on that
# CPU with GOMAXPROCS=1 (as round2.sh's PIN). One line a run: name,
# admissions/s, client CPU µs, redis-server CPU µs per admission, allocs.
# round2.sh compares two commits it builds; this, any number of builds.
set -euo pipefail
cd "$(dirname "$0")"
rounds=$1 ops=$2; shift 2
args=(-test.bench '^BenchmarkMiddlewareRedis$/^distinct$/^llmrate-middleware-direct$/^goroutines=1$' -test.benchtime "${ops}x" -test.benchmem)
pin=(); [ -n "${PIN:-}" ] && pin=(env GOMAXPROCS=1 taskset -c "$PIN")
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(go version) $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg); binaries in turn each round, each run as: ${pin[*]} ./X.test -test.run '^\$' ${args[*]}"
echo "# $*"
for r in $(seq "$rounds"); do for nb in "$@"; do
  n=${nb%%=*} b=${nb#*=}
  "${pin[@]}" "$b" -test.run '^$' "${args[@]}" | awk -v n="$n" '/^Benchmark/{for(i=1;i<=NF;i++){if($(i+1)=="admissions/s")a=$i; if($(i+1)=="client-cpu-us/op")c=$i; if($(i+1)=="server-cpu-us/op")s=$i; if($(i+1)=="allocs/op")al=$i}; print n, a, c, s, al}'
done; done
echo "# end $(date -u +%Y-%m-%dT%H:%MZ); load: $(cut -d' ' -f1-3 /proc/loadavg)"

#!/bin/bash
# usage: bench/scriptcost/measure.sh SCRIPT LAYOUT N [PORT]
# Prints redis-server's instructions per call of SCRIPT: 'I refs' under
# cachegrind of a server that took 2N calls, less one that took N, over N.
# Start-up and the script's loading cancel out.
set -e
script=$(realpath "$1") layout=$2 n=$3 port=${4:-7711}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
(cd "$(dirname "$0")/.." && GOWORK=off go build -o "$dir/scriptcost" ./scriptcost)
ir() {
  valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file="$dir/cg.$1" \
    redis-server --port "$port" --save '' --appendonly no >/dev/null 2>&1 &
  local vpid=$!
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
  "$dir/scriptcost" -addr "127.0.0.1:$port" -script "$script" -layout "$layout" -n "$1" >/dev/null
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$vpid" || true
  grep '^summary:' "$dir/cg.$1" | awk '{print $2}'
}
a=$(ir "$n")
b=$(ir $((2 * n)))
echo "$(basename "$script") layout=$layout n=$n Ir(n)=$a Ir(2n)=$b per call $(((b - a) / n))"

#!/bin/bash
# usage: bench/scriptcost/versions.sh DIR
# Writes into DIR the scripts measured beside the current admit.lua:
# admit-f09dfa6.lua (the admission script as the store sent it at commit
# f09dfa6: arith.lua, admitone.lua and admit.lua concatenated) and
# redis_rate.lua (go-redis/redis_rate v10's allowN, from the module cache).
set -e
dir=$1
root=$(git rev-parse --show-toplevel)
for f in arith admitone admit; do git -C "$root" show "f09dfa6:redisstore/$f.lua"; done > "$dir/admit-f09dfa6.lua"
rr=$(cd "$root/bench" && GOWORK=off go list -m -f '{{.Dir}}' github.com/go-redis/redis_rate/v10)
sed -n '/allowN = redis.NewScript(`/,/^`)/p' "$rr/lua.go" | sed '1d;$d' > "$dir/redis_rate.lua"

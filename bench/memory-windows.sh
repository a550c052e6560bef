#!/bin/sh
# The memory store's heap per tracked key with and without windows
# (Limits.Windows): 300,000 distinct 51-byte keys, each admitted once,
# heap after GC, as bench/memory_test.go's BenchmarkMemoryPerKey measures
# the no-windows case. Run from the repository root; writes the program to
# a temporary module that uses this checkout. Output: bench/memory-windows.txt.
set -e
root=$(pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/go.mod" <<MOD
module memw
go 1.25
require github.com/llmrate/llmrate v0.0.0
replace github.com/llmrate/llmrate => $root
MOD
cp "$root/go.sum" "$dir/"
cat > "$dir/main.go" <<'GO'
package main

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"time"

	"github.com/llmrate/llmrate"
)

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func key(i int) string { return "sk-proj-" + strconv.Itoa(100000000+i) + "0123456789abcdefghijklmnopqrstu" }

func main() {
	const n = 300_000
	day := 24 * time.Hour
	cases := []struct {
		name string
		win  []llmrate.Window
		solo bool
	}{
		{"no windows", nil, true},
		{"1 window, 1 meter (24h requests)", []llmrate.Window{{Per: day, Requests: 1000}}, true},
		{"1 window, 2 meters (24h requests+tokens)", []llmrate.Window{{Per: day, Requests: 1000, Tokens: 1e7}}, true},
		{"2 windows, 4 buckets (1m in/out, 24h req+tok)", []llmrate.Window{{Per: time.Minute, InputTokens: 1e5, OutputTokens: 1e5}, {Per: day, Requests: 1000, Tokens: 1e7}}, true},
		{"4 windows x 4 meters (16 buckets)", []llmrate.Window{
			{Per: time.Minute, Requests: 1, Tokens: 1e5, InputTokens: 1e5, OutputTokens: 1e5},
			{Per: time.Hour, Requests: 1, Tokens: 1e5, InputTokens: 1e5, OutputTokens: 1e5},
			{Per: day, Requests: 1, Tokens: 1e5, InputTokens: 1e5, OutputTokens: 1e5},
			{Per: 7 * day, Requests: 1, Tokens: 1e5, InputTokens: 1e5, OutputTokens: 1e5}}, true},
		{"separate: no windows", nil, false},
		{"separate: 1 window, 2 meters both sides", []llmrate.Window{{Per: day, Requests: 1000, Tokens: 1e7}}, false},
	}
	for _, c := range cases {
		lim := llmrate.Limits{RequestsPerMinute: 100, TokensPerMinute: 200_000, Windows: c.win}
		before := heap()
		s := llmrate.NewMemoryStore(llmrate.WithMaxKeys(2 * n))
		now := time.Now()
		for i := range n {
			k := key(i)
			ws := k
			d, err := s.Admit(context.Background(), llmrate.AdmitRequest{Key: k, Workspace: ws, KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, InputTokens: 1, Solo: c.solo, Now: now})
			if err != nil || !d.Allowed {
				panic(fmt.Sprint(err, d))
			}
		}
		after := heap()
		fmt.Printf("%-50s %6.1f B/key\n", c.name, float64(after-before)/n)
		runtime.KeepAlive(s)
		s = nil
	}
}
GO
cd "$dir" && GOFLAGS=-mod=mod GOWORK=off GOMAXPROCS=1 go run .

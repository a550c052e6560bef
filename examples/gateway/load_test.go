package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/llmrate/llmrate/internal/loadgen"
	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// loadSize is the number of requests a load test sends: 10,000 by default,
// LLMRATE_LOAD_REQUESTS to change it (RELIABILITY.md records 100,000).
func loadSize(t *testing.T) int {
	if s := os.Getenv("LLMRATE_LOAD_REQUESTS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err)
		return n
	}
	return 10_000
}

// checkWorkspaces: with demand far above the figure, each Free workspace is
// admitted its burst of 200 plus one request per 0.6 s elapsed, give or take
// the wall-clock edges of the run.
func checkWorkspaces(t *testing.T, res loadgen.Result, workspaces int) {
	t.Helper()
	require.Len(t, res.AdmittedByWorkspace, workspaces)
	refill := int64(res.Elapsed / (600 * time.Millisecond))
	for ws, a := range res.AdmittedByWorkspace {
		assert.GreaterOrEqual(t, a, int64(200), ws)
		assert.LessOrEqual(t, a, 200+refill+1, "%s over %v", ws, res.Elapsed)
	}
}

func writeConfig(t *testing.T, keys, workspaces int) string {
	p := filepath.Join(t.TempDir(), "load.json")
	require.NoError(t, os.WriteFile(p, []byte(loadgen.ConfigJSON(keys, workspaces)), 0o600))
	return p
}

// TestLoadInProcess: a bounded load against the gateway on loopback, SSE
// with usage from the mock: no 5xx, per-workspace admissions as the bucket
// arithmetic allows, and no goroutine or memory left behind.
func TestLoadInProcess(t *testing.T) {
	n := loadSize(t)
	keys, workspaces := 1000, max(1, n/2000) // ~2,000 requests per workspace
	baseG := runtime.NumGoroutine()
	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)

	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-listen", "127.0.0.1:0", "-quiet", "-log-level", "error", "-config", writeConfig(t, keys, workspaces), "-mock-words", "20"}, io.Discard, ready)
	}()
	addr := <-ready
	res := loadgen.Run(context.Background(), loadgen.Config{Targets: []string{"http://" + addr}, Requests: n, Concurrency: 256, Keys: keys, Workspaces: workspaces, Stream: true, Seed: 7})
	t.Log(res)
	assert.Zero(t, res.ServerErrors, "5xx")
	assert.Zero(t, res.TransportErrors)
	assert.Zero(t, res.OtherStatus)
	assert.Equal(t, int64(n), res.OK+res.Refused)
	checkWorkspaces(t, res, workspaces)

	cancel()
	require.NoError(t, <-done)
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= baseG+2 }, 10*time.Second, 20*time.Millisecond,
		"goroutines: %d before, %d after", baseG, runtime.NumGoroutine())
	runtime.GC()
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	t.Logf("heap %d KB before, %d KB after", m0.HeapAlloc/1024, m1.HeapAlloc/1024)
	assert.Less(t, int64(m1.HeapAlloc)-int64(m0.HeapAlloc), int64(32<<20), "no memory growth after the run")
}

// TestLoadRedisRestart: three gateway processes on one redis-server; the
// server is killed a third of the way through and restarted at two thirds.
// No 5xx, no request held much past the store timeout, and shared
// enforcement resumes.
func TestLoadRedisRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	n := loadSize(t)
	keys, workspaces := 1000, max(1, n/2000)
	srv := redistest.Start(t)
	// Generous timeouts: this 2-core machine runs three gateways, Redis and
	// the load at once; the point here is the outage, not overload.
	urls := startProcesses(t, 3, "-redis", "redis://"+srv.Addr+"/0", "-config", writeConfig(t, keys, workspaces),
		"-redis-timeout", "300ms", "-store-timeout", "400ms")
	res := loadgen.Run(context.Background(), loadgen.Config{
		Targets: urls, Requests: n, Concurrency: 128, Keys: keys, Workspaces: workspaces, Stream: true, Seed: 9,
		AtThird:     srv.Stop,
		AtTwoThirds: func() { srv.Restart(t) },
	})
	t.Log(res)
	assert.Zero(t, res.ServerErrors, "5xx")
	assert.Zero(t, res.TransportErrors)
	assert.Less(t, res.MaxLatency, 3*time.Second, "no request blocked on the dead store for long (breaker after 3 failures, 400 ms store timeout)")
	assert.Positive(t, res.Refused, "enforced while Redis was up")

	// Enforcement resumes: each process, once its retry interval is over,
	// writes a probe key's entry to Redis again; then a fresh key gets its
	// burst across the three.
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	probeStore, err := redisstore.New(c, redisstore.WithHashKey(testHashKey))
	require.NoError(t, err)
	for i, u := range urls {
		key := "sk-probe-" + strconv.Itoa(i)
		require.Eventually(t, func() bool {
			roundRobin(t, []string{u}, key, 1)
			_, k := probeStore.Keys(key, key) // a Solo key lives in its workspace entry
			return c.Exists(context.Background(), k).Val() == 1
		}, 15*time.Second, 100*time.Millisecond, "process %d resumes shared enforcement after the restart", i)
	}
	admitted, took := roundRobin(t, urls, "sk-after-restart", 250)
	assert.GreaterOrEqual(t, admitted, int64(200))
	assert.LessOrEqual(t, admitted, 200+int64(took/(600*time.Millisecond)), "shared enforcement after the restart")
}

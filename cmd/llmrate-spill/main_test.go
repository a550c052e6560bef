package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain runs the test binary as a worker when the coordinator under
// test starts it as one, as the command does.
func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == "-worker" {
		os.Exit(workerMain(os.Args[2]))
	}
	goleak.VerifyTestMain(m)
}

func TestExactBound(t *testing.T) {
	for _, c := range []struct {
		perMinute int64
		elapsed   time.Duration
		want      int64
	}{
		{600, 6 * time.Second, 1200 + 60},                     // 10 a second
		{600, 6*time.Second + 99_999*time.Microsecond, 1260},  // 60.99999: rounded down
		{600, 6*time.Second + 100_000*time.Microsecond, 1261}, // 61
		{600, 99_999 * time.Microsecond, 1200},
		{60_000, 2500 * time.Millisecond, 120_000 + 2_500},
		{60, 999 * time.Nanosecond, 120}, // below Redis's microsecond: nothing
		{1_000_000_000_000, time.Hour, 2_000_000_000_000 + 60_000_000_000_000},
	} {
		assert.Equal(t, c.want, exactBound(c.perMinute, c.elapsed), "exactBound(%d, %v)", c.perMinute, c.elapsed)
	}
}

func tinyConfig(t *testing.T) config {
	exe, err := os.Executable()
	require.NoError(t, err)
	return config{Processes: 2, Clients: 2, Duration: 1500 * time.Millisecond, Scenarios: []string{"baseline"},
		RPM: 60, TPM: 6_000, Estimate: 128, MinActual: 64, Share: 0.1, Batch: 8, Fallback: true, MaxRetries: -1,
		CtxTimeout: true, Think: time.Millisecond, Seed: 1, Drop: 0.02, Silent: 0.02, Spike: 0.05, SpikeLong: 200 * time.Millisecond,
		SpikeShort: 10 * time.Millisecond, Reset: 0.01, RestartDown: 200 * time.Millisecond, WorkerPath: exe}
}

// The control: with a memory store per process, two processes admit about
// twice one limit, and none of it was a fail-open or a fallback decision.
// The harness must report that as spillover.
func TestMemoryStoresSpill(t *testing.T) {
	cfg := tinyConfig(t)
	cfg.Modes = []string{modeMemory}
	var out bytes.Buffer
	rows, err := runBench(context.Background(), cfg, &out, nil)
	require.NoError(t, err, out.String())
	require.Len(t, rows, 1)
	r := rows[0]
	// Each process alone admits its capacity (120) within the run, so the
	// two admit at least 240 against one bucket's 120 + refill.
	assert.GreaterOrEqual(t, r.Admitted, int64(240), out.String())
	assert.GreaterOrEqual(t, r.Admitted-r.ReqBound, int64(240-120-2), "beyond exact, over %v", r.Elapsed)
	assert.Zero(t, r.counted(), "nothing failed open")
	assert.Contains(t, out.String(), "| baseline | memory store | — | ")
}

// One short baseline through Redis: the limit binds, every admission is
// attributed to who decided it, and, without leases, nothing is admitted
// beyond one exact bucket but what failed open or the fallback allowed.
// With leases the run is only checked for its attribution (the lease
// bound is docs/redis.md's to state, and the benchmark's to measure).
func TestRedisBaseline(t *testing.T) {
	cfg := tinyConfig(t)
	cfg.RedisServer = redistest.Binary(t)
	cfg.Modes = []string{modePlain, modeLease}
	var out bytes.Buffer
	rows, err := runBench(context.Background(), cfg, &out, nil)
	require.NoError(t, err, out.String())
	require.Len(t, rows, 2)
	t.Log("\n" + out.String())
	for _, r := range rows {
		assert.GreaterOrEqual(t, r.Elapsed, cfg.Duration, "%s: elapsed by Redis TIME", r.Mode)
		assert.Positive(t, r.Refused, "%s: the limit binds", r.Mode)
		assert.Equal(t, r.Requests, r.Admitted+r.Refused, r.Mode)
		assert.Zero(t, r.Unattributed, "%s: admitted = Redis + lease + fallback + failed open", r.Mode)
		assert.Positive(t, r.RecShared, "%s: usage below the estimate is reconciled in Redis", r.Mode)
		assert.Less(t, r.TokCharged, r.Admitted*r.Estimate, "%s: reconciled charges are below the estimates", r.Mode)
	}
	r := rows[0]
	assert.GreaterOrEqual(t, r.Admitted, 2*cfg.RPM, "one bucket's capacity at least is admitted")
	assert.Positive(t, r.RedisAllowed)
	assert.LessOrEqual(t, r.Admitted-r.ReqBound, r.counted(), "requests beyond exact")
	assert.LessOrEqual(t, r.TokCharged-r.TokBound, r.counted()*r.Estimate+r.TokRecFailed+r.TokRecFallback, "tokens beyond exact")
	assert.Contains(t, out.String(), "| baseline | off | off | ")
	assert.Contains(t, out.String(), "| baseline | on | off | ")
}

// The silent scenario runs: replies are discarded with their connections
// left open, the stores hedge them, and the report says so (hedges, and
// the proxy's silenced replies); without leases nothing is admitted
// beyond exact but what failed open or the fallback allowed.
func TestRedisSilent(t *testing.T) {
	cfg := tinyConfig(t)
	cfg.RedisServer = redistest.Binary(t)
	cfg.Scenarios = []string{"silent"}
	cfg.Modes = []string{modePlain}
	cfg.Silent = 0.05
	var out bytes.Buffer
	rows, err := runBench(context.Background(), cfg, &out, nil)
	require.NoError(t, err, out.String())
	require.Len(t, rows, 1)
	t.Log("\n" + out.String())
	r := rows[0]
	assert.Positive(t, r.Proxy.Silenced, "replies were silenced")
	assert.Zero(t, r.Proxy.Dropped, "none closed")
	assert.Positive(t, r.Hedges, "the stores hedged")
	assert.Zero(t, r.Unattributed)
	assert.LessOrEqual(t, r.Admitted-r.ReqBound, r.counted(), "requests beyond exact")
	assert.Contains(t, out.String(), "| silent | off | off | ")
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-modes", "plain,nope"},
		{"-scenarios", "baseline,flood"},
		{"-min-actual", "200", "-estimate", "100"},
		{"-n", "0"},
		{"-duration", "0s"},
	} {
		var stdout, stderr bytes.Buffer
		assert.Equal(t, 2, coordinatorMain(args, &stdout, &stderr), "args %q", args)
		assert.NotEmpty(t, stderr.String(), "args %q", args)
		assert.Empty(t, stdout.String(), "nothing run for %q", args)
	}
	var stdout, stderr bytes.Buffer
	assert.Equal(t, 2, coordinatorMain([]string{"-modes", "plain,nope"}, &stdout, &stderr))
	assert.True(t, strings.Contains(stderr.String(), `unknown mode "nope"`), stderr.String())
}

package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDayBound(t *testing.T) {
	assert.Equal(t, int64(1_500), dayBound(1_500, 57_599_999*time.Microsecond))
	assert.Equal(t, int64(1_501), dayBound(1_500, 57_600*time.Millisecond), "one back every 57.6 s")
	assert.Equal(t, int64(3_000), dayBound(1_500, 24*time.Hour))
	assert.Equal(t, int64(1_000_000_000_000+11), dayBound(1_000_000_000_000, time.Microsecond))
	assert.Greater(t, dayBound(0, time.Hour), int64(1)<<62, "no window: no bound")
}

// TestRedisDayWindow: with a daily window on the key, tighter than the
// minute's figures, the requests admitted through Redis are held to the
// window's exact figure (nothing beyond it but what failed open or the
// fallback allowed), with and without leases (which windowed admissions
// bypass) and with batching (likewise).
func TestRedisDayWindow(t *testing.T) {
	cfg := tinyConfig(t)
	cfg.RedisServer = redistest.Binary(t)
	cfg.Modes = []string{modePlain, modeBatch, modeLease}
	cfg.DayRequests = 40 // below the minute's capacity (120)
	var out bytes.Buffer
	rows, err := runBench(context.Background(), cfg, &out, nil)
	require.NoError(t, err, out.String())
	require.Len(t, rows, 3)
	t.Log("\n" + out.String())
	assert.Contains(t, out.String(), "a daily window on the key: 40 requests per day")
	for _, r := range rows {
		assert.Equal(t, int64(40), r.ReqBound, "%s: the window's bound is the tighter", r.Mode)
		assert.Positive(t, r.Refused, "%s: the window binds", r.Mode)
		assert.Zero(t, r.Unattributed, r.Mode)
		assert.Zero(t, r.LeaseLocal, "%s: no admission decided on a lease", r.Mode)
		assert.LessOrEqual(t, r.Admitted-r.ReqBound, r.counted(), "%s: requests beyond the window's exact figure", r.Mode)
		// Under exact by at most one a hedge: a hedge of an admission
		// Redis refused may be admitted when it runs, a debit spent on
		// nothing (docs/known-limits.md). CI saw 39 with 30 hedges.
		assert.GreaterOrEqual(t, r.Admitted, int64(40)-r.Hedges, "%s: %d hedges", r.Mode, r.Hedges)
	}
}

func TestBadDay(t *testing.T) {
	var stdout, stderr bytes.Buffer
	assert.Equal(t, 2, coordinatorMain([]string{"-day", "-1"}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "-day")
}

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

// TestRedisMonthWindow: with a calendar month window on the key whose
// boundary falls inside the run (one clock offset shared by the workers),
// the requests admitted through Redis are held to each period's figure:
// both periods are spent (the quota is full again at the 1st, 00:00 UTC,
// and not before) and nothing is admitted beyond twice the figure but what
// failed open or the fallback allowed, under lost replies, resets and
// spikes, with and without leases.
func TestRedisMonthWindow(t *testing.T) {
	cfg := tinyConfig(t)
	cfg.RedisServer = redistest.Binary(t)
	cfg.Scenarios = []string{"drop", "reset", "spike-short"}
	cfg.Modes = []string{modePlain, modeLease}
	cfg.MonthRequests = 20 // each period far below the minute's capacity (120)
	var out bytes.Buffer
	rows, err := runBench(context.Background(), cfg, &out, nil)
	require.NoError(t, err, out.String())
	require.Len(t, rows, 6)
	t.Log("\n" + out.String())
	assert.Contains(t, out.String(), "a calendar month window on the key: 20 requests per month (UTC)")
	for _, r := range rows {
		assert.Equal(t, int64(40), r.ReqBound, "%s %s: two periods of 20", r.Scenario, r.Mode)
		assert.Zero(t, r.Unattributed, "%s %s", r.Scenario, r.Mode)
		assert.LessOrEqual(t, r.Admitted-r.ReqBound, r.counted(), "%s %s: requests beyond the periods' figures", r.Scenario, r.Mode)
		assert.Greater(t, r.Admitted, int64(20)+r.counted(), "%s %s: the second period admitted too (%d hedges)", r.Scenario, r.Mode, r.Hedges)
	}
}

func TestBadDay(t *testing.T) {
	var stdout, stderr bytes.Buffer
	assert.Equal(t, 2, coordinatorMain([]string{"-day", "-1"}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "-day")
}

func TestMonthOffset(t *testing.T) {
	now := time.Date(2026, 12, 7, 23, 40, 0, 0, time.UTC)
	off := monthOffset(now, 3*time.Second)
	assert.Equal(t, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), now.Add(3*time.Second).Add(off), "3 s into the run reads as the 1st at 00:00 UTC")
	assert.Equal(t, int64(400), monthBound(200), "two periods of 200")
	assert.Greater(t, monthBound(0), int64(1)<<62, "no window: no bound")
	var c config
	c.Duration, c.MonthRequests = 6*time.Second, 10
	assert.Equal(t, 3*time.Second, c.monthAt(), "half-way by default")
	c.MonthAt = 6 * time.Second
	assert.Error(t, c.validateMonth(), "the boundary must fall inside the run")
}

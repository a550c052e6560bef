package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest/redisrig"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

// quotaStore is windowStore with the client, to look at the keys written.
func quotaStore(t *testing.T, at time.Time, opts ...redisstore.Option) (*redisstore.Store, *fakeClock, *redis.Client) {
	t.Helper()
	_, c := redisrig.Start(t)
	clk := &fakeClock{t: at}
	return redisrig.Store(t, c, append([]redisstore.Option{redisstore.WithClock(clk.now)}, opts...)...), clk, c
}

func admit(t *testing.T, s *redisstore.Store, r llmrate.AdmitRequest) llmrate.Decision {
	t.Helper()
	d, err := s.Admit(context.Background(), r)
	require.NoError(t, err, "Admit(%q)", r.Key)
	return d
}

func peek(t *testing.T, s *redisstore.Store, r llmrate.AdmitRequest) llmrate.Decision {
	t.Helper()
	d, err := s.Peek(context.Background(), r)
	require.NoError(t, err, "Peek(%q)", r.Key)
	return d
}

func keyCount(t *testing.T, c *redis.Client) int {
	t.Helper()
	ks, err := c.Keys(context.Background(), "*").Result()
	require.NoError(t, err)
	return len(ks)
}

// TestUnlimitedPerMinuteHasNoBucket: an Unlimited per-minute figure is no
// bucket: never refuses, reads 0, is not in Retry-After, and with both of
// an entry's figures Unlimited nothing is written for it.
func TestUnlimitedPerMinuteHasNoBucket(t *testing.T) {
	s, _, c := quotaStore(t, time.Unix(1_750_000_000, 0))
	unl := llmrate.Limits{RequestsPerMinute: llmrate.Unlimited, TokensPerMinute: llmrate.Unlimited}
	r := llmrate.AdmitRequest{Key: "sk-unl", Workspace: "acme", KeyLimits: unl, WorkspaceLimits: unl, Tokens: 1_000_000_000_000}
	for i := range 500 {
		d := admit(t, s, r)
		require.True(t, d.Allowed, "admission %d", i)
		require.Equal(t, [4]int64{}, d.Remaining)
	}
	assert.Zero(t, keyCount(t, c), "no per-minute key written")
	require.NoError(t, s.Reconcile(context.Background(), llmrate.ReconcileRequest{Key: r.Key, Workspace: r.Workspace,
		KeyLimits: unl, WorkspaceLimits: unl, Estimate: r.Tokens, Actual: 5}))
	assert.Zero(t, keyCount(t, c), "no per-minute key written by a reconcile")

	// One meter Unlimited, the other limited: only the limited one decides.
	one := llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: llmrate.Unlimited}
	r = llmrate.AdmitRequest{Key: "sk-one", Workspace: "acme", KeyLimits: one, WorkspaceLimits: unl, Tokens: 1_000_000_000_000}
	for i := range 2 { // 2 × RPM when full
		d := admit(t, s, r)
		require.True(t, d.Allowed, "admission %d", i)
		assert.Equal(t, [4]int64{int64(1 - i), 0, 0, 0}, d.Remaining)
	}
	d := admit(t, s, r)
	assert.False(t, d.Allowed)
	assert.Equal(t, llmrate.KeyRequests, d.Refused)
	assert.Equal(t, time.Minute, d.RetryAfter, "one request per minute; the Unlimited meter waits for nothing")
	assert.False(t, d.NeverFits)
}

// TestCalendarMonthFullAgainAtTheFirstInItsZone: a monthly request quota
// in Europe/Berlin holds its figure the whole month (nothing refills), is
// refused until 1 February 00:00 in Berlin with the exact, uncapped wait,
// and is full again exactly then, not a microsecond before.
func TestCalendarMonthFullAgainAtTheFirstInItsZone(t *testing.T) {
	berlin := zone(t, "Europe/Berlin")
	start := time.Date(2026, time.January, 15, 12, 0, 0, 0, berlin)
	first := time.Date(2026, time.February, 1, 0, 0, 0, 0, berlin)
	s, clk, _ := quotaStore(t, start)
	month := llmrate.Window{Calendar: llmrate.CalendarMonth, Zone: berlin, Requests: 3}
	r := llmrate.AdmitRequest{Key: "sk-month", Workspace: "acme", KeyLimits: withWindows(roomy, month), WorkspaceLimits: roomy, Tokens: 1,
		Now: start.Add(-40 * 24 * time.Hour)} // the limiter's clock: ignored
	for i := range 3 {
		d := admit(t, s, r)
		require.True(t, d.Allowed, "admission %d", i)
		require.Equal(t, []llmrate.WindowLevels{{Requests: int64(2 - i), Reset: first.UTC()}}, normalize(d.KeyWindows))
		assert.True(t, d.At.Equal(start), "At is the store's clock: %v", d.At)
	}
	clk.add(10 * 24 * time.Hour) // nothing refills within the month
	d := admit(t, s, r)
	assert.False(t, d.Allowed)
	assert.Equal(t, llmrate.KeyRequests, d.Refused)
	assert.Equal(t, llmrate.CalendarMonth, d.Calendar)
	assert.Equal(t, "Europe/Berlin", d.Zone)
	assert.Zero(t, d.Window, "a calendar window's Per")
	assert.False(t, d.Session)
	assert.False(t, d.Lent)
	assert.Equal(t, first.Sub(clk.now()), d.RetryAfter, "exact and uncapped: to 1 February 00:00 in Berlin")
	assert.False(t, d.NeverFits)

	clk.t = first.Add(-time.Microsecond)
	assert.False(t, admit(t, s, r).Allowed, "a microsecond before the 1st")
	clk.t = first
	d = admit(t, s, r)
	require.True(t, d.Allowed, "at the 1st 00:00 in Berlin")
	march := time.Date(2026, time.March, 1, 0, 0, 0, 0, berlin)
	assert.Equal(t, []llmrate.WindowLevels{{Requests: 2, Reset: march.UTC()}}, normalize(d.KeyWindows))

	// A request above the figure never fits.
	big := llmrate.Window{Calendar: llmrate.CalendarMonth, Zone: berlin, Tokens: 100}
	d = admit(t, s, llmrate.AdmitRequest{Key: "sk-big", Workspace: "acme", KeyLimits: roomy, WorkspaceLimits: withWindows(roomy, big), Tokens: 101})
	assert.False(t, d.Allowed)
	assert.True(t, d.NeverFits)
	assert.Equal(t, llmrate.WorkspaceTokens, d.Refused)
}

// normalize puts every Reset in UTC, so that instants compare by value.
func normalize(ls []llmrate.WindowLevels) []llmrate.WindowLevels {
	out := make([]llmrate.WindowLevels, len(ls))
	for i, l := range ls {
		out[i] = l
		if !l.Reset.IsZero() {
			out[i].Reset = l.Reset.UTC()
		}
	}
	return out
}

package redisstore_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/redistest"
	"github.com/llmrate/llmrate/internal/redistest/redisrig"
	"github.com/llmrate/llmrate/redisstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeClock is a clock the tests move by hand (WithClock).
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_750_000_000, 0)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// roomy are per-minute figures no test here runs out of, so that the
// windows decide.
var roomy = llmrate.Limits{RequestsPerMinute: 1_000_000, TokensPerMinute: llmrate.MaxPerMinute}

func withWindows(l llmrate.Limits, ws ...llmrate.Window) llmrate.Limits {
	l.Windows = ws
	return l
}

func windowStore(t *testing.T, opts ...redisstore.Option) (*redisstore.Store, *fakeClock, *redistest.Server) {
	t.Helper()
	srv, c := redisrig.Start(t)
	clk := newFakeClock()
	return redisrig.Store(t, c, append([]redisstore.Option{redisstore.WithClock(clk.now)}, opts...)...), clk, srv
}

// TestWindowDailyQuotaRefillsOneEvery57_6s: 1,500 requests per day hold
// 1,500 (no burst) and give one back every 57.6 s exactly, never all at
// once; the refusal names the key's requests meter, its window, and a
// Retry-After past a minute.
func TestWindowDailyQuotaRefillsOneEvery57_6s(t *testing.T) {
	s, clk, _ := windowStore(t)
	ctx := context.Background()
	day := llmrate.Window{Per: 24 * time.Hour, Requests: 1_500}
	r := llmrate.AdmitRequest{Key: "sk-day", Workspace: "acme", KeyLimits: withWindows(roomy, day), WorkspaceLimits: roomy, Tokens: 1}
	for i := range 1_500 {
		d, err := s.Admit(ctx, r)
		require.NoError(t, err)
		require.True(t, d.Allowed, "admission %d", i)
		require.Equal(t, []llmrate.WindowLevels{{Requests: int64(1_499 - i)}}, d.KeyWindows)
		require.Nil(t, d.WorkspaceWindows)
	}
	d, err := s.Admit(ctx, r)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, llmrate.KeyRequests, d.Refused)
	assert.Equal(t, 24*time.Hour, d.Window)
	assert.Equal(t, 57_600*time.Millisecond, d.RetryAfter, "86,400 s / 1,500")
	assert.False(t, d.NeverFits)

	clk.add(57_600*time.Millisecond - time.Microsecond)
	d, err = s.Admit(ctx, r)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "a microsecond early")
	assert.Equal(t, time.Microsecond, d.RetryAfter)
	clk.add(time.Microsecond)
	d, err = s.Admit(ctx, r)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "one back at 57.6 s")
	d, err = s.Admit(ctx, r)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "and only one")
	assert.Equal(t, 57_600*time.Millisecond, d.RetryAfter)

	// 100 more in 5,760 s; a full day later it is full, not more.
	clk.add(5_760 * time.Second)
	for range 100 {
		d, err = s.Admit(ctx, r)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	d, err = s.Admit(ctx, r)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	clk.add(48 * time.Hour)
	d, err = s.Admit(ctx, r)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Equal(t, int64(1_499), d.KeyWindows[0].Requests, "capacity is the figure: no burst")
}

// TestWindowRetryAfterCappedAtPer: a wait longer than the window is
// capped at the window (a debt of twice the capacity takes up to three
// windows to clear); a request above a window's capacity never fits.
func TestWindowRetryAfterCappedAtPer(t *testing.T) {
	s, _, _ := windowStore(t)
	ctx := context.Background()
	hour := llmrate.Window{Per: time.Hour, Tokens: 3_600}
	lim := withWindows(roomy, hour)
	r := llmrate.AdmitRequest{Key: "sk-h", Workspace: "acme", KeyLimits: lim, WorkspaceLimits: roomy, Tokens: 100, ID: llmrate.NewAdmissionID()}
	d, err := s.Admit(ctx, r)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	// Charged far beyond: bounded at twice the capacity, 7,200: level
	// 3,500 - 7,100 = -3,600.
	require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: r.Key, Workspace: r.Workspace, KeyLimits: lim, WorkspaceLimits: roomy,
		Estimate: 100, Actual: 1_000_000, ID: r.ID}))
	r.ID = ""
	d, err = s.Admit(ctx, r)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	assert.Equal(t, llmrate.KeyTokens, d.Refused)
	assert.Equal(t, time.Hour, d.Window)
	assert.Equal(t, []llmrate.WindowLevels{{Tokens: -3_600}}, d.KeyWindows)
	assert.Equal(t, time.Hour, d.RetryAfter, "3,700 s to hold 100 tokens, capped at the window")

	r.Tokens = 3_601
	d, err = s.Admit(ctx, r)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.True(t, d.NeverFits, "above the window's capacity")
	assert.Equal(t, llmrate.KeyTokens, d.Refused)
	assert.Equal(t, time.Hour, d.RetryAfter)

	// A minute window's wait stays capped at 60 s, as the per-minute
	// buckets'.
	s2, _, _ := windowStore(t)
	sec := llmrate.Window{Per: time.Second, Requests: 1}
	r2 := llmrate.AdmitRequest{Key: "sk-s", Workspace: "acme", KeyLimits: roomy, WorkspaceLimits: withWindows(roomy, sec), Tokens: 1}
	d, err = s2.Admit(ctx, r2)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	d, err = s2.Admit(ctx, r2)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	assert.Equal(t, llmrate.WorkspaceRequests, d.Refused)
	assert.Equal(t, time.Second, d.Window)
	assert.Equal(t, time.Second, d.RetryAfter)
	assert.Equal(t, []llmrate.WindowLevels{{}}, d.WorkspaceWindows)

	// Rounded up to the microsecond: 999,999 tokens a second give one back
	// every 1.000001 µs, so the wait is 2 µs.
	odd := llmrate.Window{Per: time.Second, Tokens: 999_999}
	r3 := llmrate.AdmitRequest{Key: "sk-odd", Workspace: "acme", KeyLimits: withWindows(roomy, odd), WorkspaceLimits: roomy, Tokens: 999_999}
	d, err = s2.Admit(ctx, r3)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	r3.Tokens = 1
	d, err = s2.Admit(ctx, r3)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	assert.Equal(t, 2*time.Microsecond, d.RetryAfter)
}

// TestWindowInputOutputMeters: the input meter is debited the input
// estimate and charged the reported input; the output meter is debited
// nothing, admits while it holds 1, and is charged the reported output.
func TestWindowInputOutputMeters(t *testing.T) {
	s, clk, _ := windowStore(t)
	ctx := context.Background()
	anth := llmrate.Window{Per: time.Minute, InputTokens: 1_000, OutputTokens: 500}
	lim := withWindows(roomy, anth)
	r := llmrate.AdmitRequest{Key: "sk-a", Workspace: "acme", KeyLimits: lim, WorkspaceLimits: roomy, Tokens: 5_000, InputTokens: 600, ID: llmrate.NewAdmissionID()}
	d, err := s.Admit(ctx, r)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Equal(t, []llmrate.WindowLevels{{InputTokens: 400, OutputTokens: 500}}, d.KeyWindows)

	second := r
	second.ID, second.InputTokens = "", 401
	d, err = s.Admit(ctx, second)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	assert.Equal(t, llmrate.KeyInputTokens, d.Refused)
	assert.Equal(t, time.Minute, d.Window)
	assert.Equal(t, 60*time.Millisecond, d.RetryAfter, "one input token per 60 ms")

	rec := llmrate.ReconcileRequest{Key: r.Key, Workspace: r.Workspace, KeyLimits: lim, WorkspaceLimits: roomy, ID: r.ID,
		Estimate: 5_000, Actual: 5_000, InputEstimate: 600, InputActual: 100, OutputActual: 499}
	require.NoError(t, s.Reconcile(ctx, rec))
	require.NoError(t, s.Reconcile(ctx, rec), "a repeat is not applied again")

	third := r
	third.ID, third.InputTokens = llmrate.NewAdmissionID(), 900
	d, err = s.Admit(ctx, third)
	require.NoError(t, err)
	require.True(t, d.Allowed, "input 400 + 500 credited; output holds 1")
	assert.Equal(t, []llmrate.WindowLevels{{InputTokens: 0, OutputTokens: 1}}, d.KeyWindows)
	require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: r.Key, Workspace: r.Workspace, KeyLimits: lim, WorkspaceLimits: roomy, ID: third.ID,
		Estimate: 5_000, Actual: 5_000, InputEstimate: 900, InputActual: 900, OutputActual: 10}))

	clk.add(time.Second) // input +16 (1,000/60 per s), output +8 (500/60), with remainders
	fourth := r
	fourth.ID, fourth.InputTokens = "", 0
	d, err = s.Admit(ctx, fourth)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	assert.Equal(t, llmrate.KeyOutputTokens, d.Refused, "output at 1 - 10 + 8 = -1")
	assert.Equal(t, []llmrate.WindowLevels{{InputTokens: 16, OutputTokens: -1}}, d.KeyWindows)
	// Output: 1 - 10 = -9 at t0; needs 10 at 500/min: 1.2 s from t0, so 200 ms now.
	assert.Equal(t, 200*time.Millisecond, d.RetryAfter)
	assert.Equal(t, time.Minute, d.Window)

	fourth.InputTokens = 1_001
	d, err = s.Admit(ctx, fourth)
	require.NoError(t, err)
	assert.True(t, d.NeverFits)
	assert.Equal(t, llmrate.KeyInputTokens, d.Refused, "input before output")
}

// TestWindowRefusalOrder: the four per-minute buckets, then the key's
// windows in order (in each requests, tokens, input, output), then the
// workspace's, then the gauges.
func TestWindowRefusalOrder(t *testing.T) {
	ctx := context.Background()
	day, hour := 24*time.Hour, time.Hour
	keyWins := []llmrate.Window{{Per: hour, Tokens: 10, OutputTokens: 1}, {Per: day, Requests: 1, InputTokens: 5}}
	wsWins := []llmrate.Window{{Per: day, Requests: 1}}
	kl := llmrate.Limits{RequestsPerMinute: 1, TokensPerMinute: 1_000, ConcurrentRequests: 1, Windows: keyWins}
	wl := llmrate.Limits{RequestsPerMinute: 1_000, TokensPerMinute: 1_000, ConcurrentRequests: 1, Windows: wsWins}
	s, _, _ := windowStore(t)
	r := llmrate.AdmitRequest{Key: "sk-o", Workspace: "acme", KeyLimits: kl, WorkspaceLimits: wl, Tokens: 1, InputTokens: 1, ID: llmrate.NewAdmissionID()}
	d, err := s.Admit(ctx, r)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Equal(t, []llmrate.WindowLevels{{Tokens: 9, OutputTokens: 1}, {Requests: 0, InputTokens: 4}}, d.KeyWindows)
	assert.Equal(t, []llmrate.WindowLevels{{Requests: 0}}, d.WorkspaceWindows)

	refused := func(r llmrate.AdmitRequest, b llmrate.Bucket, w time.Duration) {
		t.Helper()
		r.ID = llmrate.NewAdmissionID()
		d, err := s.Admit(ctx, r)
		require.NoError(t, err)
		require.False(t, d.Allowed)
		assert.Equal(t, b, d.Refused)
		assert.Equal(t, w, d.Window)
	}
	// Every window bucket but the hour's tokens is empty, and so is the
	// key's per-minute requests bucket (1 per minute, burst 2: one left).
	r.KeyLimits.RequestsPerMinute = 1 // burst 2, one used
	r.Tokens = 11
	refused(r, llmrate.KeyTokens, hour) // per-minute has room; the hour's tokens first
	r.Tokens = 1
	refused(r, llmrate.KeyRequests, day) // then the day's requests
	r.KeyLimits.Windows = []llmrate.Window{keyWins[0]}
	refused(r, llmrate.WorkspaceRequests, day) // then the workspace's day
	r.WorkspaceLimits.Windows = nil
	refused(r, llmrate.KeyConcurrent, 0) // then the gauges
	r.KeyLimits.Windows = []llmrate.Window{keyWins[0], {Per: day, InputTokens: 5}}
	r.InputTokens = 5
	refused(r, llmrate.KeyInputTokens, day)
	r.KeyLimits.TokensPerMinute = 1 // the per-minute buckets come first
	r.Tokens = 3
	refused(r, llmrate.KeyTokens, time.Minute)
}

// TestWindowSolo: a Solo request's windows are one set, kept once, named
// as the key's; both level slices report it.
func TestWindowSolo(t *testing.T) {
	s, _, srv := windowStore(t)
	ctx := context.Background()
	lim := withWindows(roomy, llmrate.Window{Per: 24 * time.Hour, Requests: 2})
	r := llmrate.AdmitRequest{Key: "sk-solo", Workspace: "sk-solo", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 1, Solo: true}
	for i := range 2 {
		d, err := s.Admit(ctx, r)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		want := []llmrate.WindowLevels{{Requests: int64(1 - i)}}
		assert.Equal(t, want, d.KeyWindows)
		assert.Equal(t, want, d.WorkspaceWindows)
	}
	d, err := s.Admit(ctx, r)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	assert.Equal(t, llmrate.KeyRequests, d.Refused)
	assert.Equal(t, 24*time.Hour, d.Window)
	keys, err := redisrig.Client(t, srv.Addr).Keys(ctx, "*").Result()
	require.NoError(t, err)
	assert.Len(t, keys, 2, "the workspace's entry and one window bucket")
}

// TestWindowIdentityRepeat: an admission sent again under its ID gets its
// first decision, window levels included, and debits nothing again.
func TestWindowIdentityRepeat(t *testing.T) {
	s, _, _ := windowStore(t)
	ctx := context.Background()
	lim := withWindows(roomy, llmrate.Window{Per: 24 * time.Hour, Requests: 10, Tokens: 1_000})
	r := llmrate.AdmitRequest{Key: "sk-id", Workspace: "acme", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 100, ID: llmrate.NewAdmissionID()}
	first, err := s.Admit(ctx, r)
	require.NoError(t, err)
	require.True(t, first.Allowed)
	for range 3 {
		again, err := s.Admit(ctx, r)
		require.NoError(t, err)
		assert.Equal(t, first, again)
	}
	r.ID = llmrate.NewAdmissionID()
	next, err := s.Admit(ctx, r)
	require.NoError(t, err)
	assert.Equal(t, []llmrate.WindowLevels{{Requests: 8, Tokens: 800}}, next.KeyWindows, "debited twice, not four times")
	assert.Equal(t, []llmrate.WindowLevels{{Requests: 8, Tokens: 800}}, next.WorkspaceWindows)

	// A refund credits the windows back, once.
	refund := llmrate.ReconcileRequest{Key: r.Key, Workspace: r.Workspace, KeyLimits: lim, WorkspaceLimits: lim, Estimate: 100, Refund: true, ID: r.ID}
	require.NoError(t, s.Reconcile(ctx, refund))
	require.NoError(t, s.Reconcile(ctx, refund))
	r.ID = ""
	d, err := s.Admit(ctx, r)
	require.NoError(t, err)
	assert.Equal(t, []llmrate.WindowLevels{{Requests: 8, Tokens: 800}}, d.KeyWindows, "refunded once, then debited")
}

// TestWindowDailyTrillionExact: a daily window of 10^12 tokens, the
// largest figure, refills exactly: 10^12 / 86,400,000,000 per µs, the
// remainders carried, at instants where a double would round.
func TestWindowDailyTrillionExact(t *testing.T) {
	s, clk, _ := windowStore(t)
	ctx := context.Background()
	const fig = 1_000_000_000_000
	lim := withWindows(llmrate.Limits{RequestsPerMinute: 1_000_000, TokensPerMinute: fig}, llmrate.Window{Per: 24 * time.Hour, Tokens: fig})
	r := llmrate.AdmitRequest{Key: "sk-t", Workspace: "acme", KeyLimits: lim, WorkspaceLimits: roomy, Tokens: fig}
	d, err := s.Admit(ctx, r)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, int64(0), d.KeyWindows[0].Tokens)
	// After t µs the level is floor(t × 10^12 / 8.64 × 10^10) = floor(t ×
	// 250 / 21.6) = floor(t × 625 / 54). Probe with 1-token admissions
	// (each debits 1, so the expected level drops by one each time).
	elapsed, debited := int64(0), int64(0)
	for _, step := range []int64{1, 53, 1_000_003, 86_399_999_999 - 1_000_057, 1} {
		clk.add(time.Duration(step) * time.Microsecond)
		elapsed += step
		r.Tokens = 1
		d, err = s.Admit(ctx, r)
		require.NoError(t, err)
		want := min(elapsed*625/54-debited, fig) - 1
		require.True(t, d.Allowed, "after %d µs", elapsed)
		debited++
		assert.Equal(t, want, d.KeyWindows[0].Tokens, "after %d µs", elapsed)
	}
	// The whole day has refilled 10^12 less the 4 debited since: 10^12 - 5
	// left, not full. Two days later it is full: drained at once, a 10^12
	// request waits exactly one day (capped there).
	clk.add(48 * time.Hour)
	d, err = s.Admit(ctx, r)
	require.NoError(t, err)
	require.Equal(t, int64(fig-1), d.KeyWindows[0].Tokens)
	r.Tokens = fig - 1
	d, err = s.Admit(ctx, r)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, int64(0), d.KeyWindows[0].Tokens)
	r.Tokens = fig
	d, err = s.Admit(ctx, r)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	assert.Equal(t, 24*time.Hour, d.RetryAfter)
	r.Tokens = 7
	d, err = s.Admit(ctx, r)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	assert.Equal(t, time.Microsecond, d.RetryAfter, "ceil(7 × 54 / 625) µs")
}

// TestWindowKeysExpireOnceRefilled: each window bucket's entry lives until
// time alone refills it (plus a second), a debt included, and is named by
// keyed hashes only.
func TestWindowKeysExpireOnceRefilled(t *testing.T) {
	s, _, srv := windowStore(t)
	c := redisrig.Client(t, srv.Addr)
	ctx := context.Background()
	lim := withWindows(roomy, llmrate.Window{Per: 24 * time.Hour, Requests: 1_500, Tokens: 1_000_000})
	const raw = "sk-live-SECRET-expiry"
	r := llmrate.AdmitRequest{Key: raw, Workspace: "acme-corp", KeyLimits: lim, WorkspaceLimits: roomy, Tokens: 1_000, ID: llmrate.NewAdmissionID()}
	d, err := s.Admit(ctx, r)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	k, _ := s.Keys(raw, "acme-corp")
	pttl := func(name string) time.Duration {
		t.Helper()
		v, err := c.PTTL(ctx, name).Result()
		require.NoError(t, err)
		return v
	}
	reqEntry, tokEntry := k+":v86400000r", k+":v86400000t"
	// One request of 1,500 a day: 57.6 s to refill, + 1 s.
	assert.InDelta(t, 58_600, pttl(reqEntry).Milliseconds(), 50)
	// 1,000 tokens of 10^6 a day: 86.4 s, + 1 s.
	assert.InDelta(t, 87_400, pttl(tokEntry).Milliseconds(), 50)
	keys, err := c.Keys(ctx, "*").Result()
	require.NoError(t, err)
	for _, name := range keys {
		assert.NotContains(t, name, "SECRET")
		assert.NotContains(t, name, "acme")
	}
	// In debt: charged 2 × 10^6 (bounded), level 10^6 - 2 × 10^6 + ... =
	// -10^6: two days to refill (1,000 + 2,000,000 - 1,000 = 2 × 10^6
	// below full).
	require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: raw, Workspace: "acme-corp", KeyLimits: lim, WorkspaceLimits: roomy,
		Estimate: 1_000, Actual: 5_000_000, ID: r.ID}))
	assert.InDelta(t, (48*time.Hour + time.Second).Milliseconds(), pttl(tokEntry).Milliseconds(), 50)
	assert.InDelta(t, 58_600, pttl(reqEntry).Milliseconds(), 50, "requests never reconcile")
}

// TestWindowOneRoundTrip: a windowed admission and its reconcile are one
// script call each, gauges and windows of both scopes included.
func TestWindowOneRoundTrip(t *testing.T) {
	s, _, srv := windowStore(t)
	c := redisrig.Client(t, srv.Addr)
	ctx := context.Background()
	kl := withWindows(llmrate.Limits{RequestsPerMinute: 100, TokensPerMinute: 100_000, ConcurrentRequests: 5},
		llmrate.Window{Per: 24 * time.Hour, Requests: 1_000, Tokens: 1_000_000}, llmrate.Window{Per: time.Minute, InputTokens: 10_000, OutputTokens: 1_000})
	wl := withWindows(llmrate.Limits{RequestsPerMinute: 100, TokensPerMinute: 100_000}, llmrate.Window{Per: time.Hour, Requests: 500})
	one := func() {
		r := llmrate.AdmitRequest{Key: "sk-rt", Workspace: "acme", KeyLimits: kl, WorkspaceLimits: wl, Tokens: 10, InputTokens: 8, ID: llmrate.NewAdmissionID()}
		d, err := s.Admit(ctx, r)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: r.Key, Workspace: r.Workspace, KeyLimits: kl, WorkspaceLimits: wl,
			Estimate: 10, Actual: 12, InputEstimate: 8, InputActual: 9, OutputActual: 3, ID: r.ID, Receipt: d.Receipt}))
	}
	one() // loads the scripts
	before := commandCalls(t, c)
	for range 20 {
		one()
	}
	after := commandCalls(t, c)
	assert.Equal(t, int64(40), after["evalsha"]-before["evalsha"])
	assert.Equal(t, before["eval"], after["eval"])
	assert.Equal(t, 0, s.Held(), "slots released by the reconciles")
}

// TestWindowWithLeases: with WithLeases a windowed admission bypasses the
// leases and is held to its window exactly.
func TestWindowWithLeases(t *testing.T) {
	s, _, _ := windowStore(t, redisstore.WithLeases(0.25))
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	ctx := context.Background()
	lim := withWindows(llmrate.Limits{RequestsPerMinute: 10_000, TokensPerMinute: 1_000_000}, llmrate.Window{Per: 24 * time.Hour, Requests: 50})
	admitted := 0
	for i := range 80 {
		r := llmrate.AdmitRequest{Key: "sk-l", Workspace: "acme", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 10, ID: "a" + strconv.Itoa(i)}
		d, err := s.Admit(ctx, r)
		require.NoError(t, err)
		if d.Allowed {
			admitted++
			require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: r.Key, Workspace: r.Workspace, KeyLimits: lim, WorkspaceLimits: lim,
				Estimate: 10, Actual: 20, ID: r.ID, Receipt: d.Receipt}))
		}
	}
	assert.Equal(t, 50, admitted)
	assert.Equal(t, 0, s.Leased(), "no admission decided on a lease")
}

// TestWindowFallbackLocal: with Redis down, a windowed admission is
// decided by the local fallback (its receipt says so) and its reconcile
// goes there too, never to Redis.
func TestWindowFallbackLocal(t *testing.T) {
	s, _, srv := windowStore(t, redisstore.WithFallbackLocal(), redisstore.WithTimeout(200*time.Millisecond))
	ctx := context.Background()
	lim := withWindows(roomy, llmrate.Window{Per: 24 * time.Hour, Requests: 5})
	r := llmrate.AdmitRequest{Key: "sk-fb", Workspace: "acme", KeyLimits: lim, WorkspaceLimits: lim, Tokens: 10, ID: llmrate.NewAdmissionID(), Now: time.Now()}
	d, err := s.Admit(ctx, r)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Empty(t, d.Receipt, "decided in Redis")
	srv.Stop()
	r.ID = llmrate.NewAdmissionID()
	d, err = s.Admit(ctx, r)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Equal(t, "local", d.Receipt, "decided by the fallback")
	require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: r.Key, Workspace: r.Workspace, KeyLimits: lim, WorkspaceLimits: lim,
		Estimate: 10, Actual: 5, ID: r.ID, Receipt: d.Receipt, Now: time.Now()}), "reconciled in the fallback while Redis is down")
}

// TestWindowReconcileDebtStopsLeases: with WithLeases, a windowed key's
// reconcile that leaves the workspace in debt stops this process's
// admissions on its workspace lease at once (the lease goes back in the
// same call), as a plain reconcile's does: another key of the workspace,
// admitting on that lease, is refused by Redis next.
func TestWindowReconcileDebtStopsLeases(t *testing.T) {
	s, _, _ := windowStore(t, redisstore.WithLeases(0.25))
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	ctx := context.Background()
	ws := llmrate.Limits{RequestsPerMinute: 1_000, TokensPerMinute: 100_000}
	plain := llmrate.AdmitRequest{Key: "sk-b", Workspace: "acme", KeyLimits: ws, WorkspaceLimits: ws, Tokens: 10}
	for range 5 { // busy: the second call through Redis takes leases, the rest use them
		plain.ID = llmrate.NewAdmissionID()
		d, err := s.Admit(ctx, plain)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	leased := s.Leased()
	require.Positive(t, leased, "sk-b admits on its leases")

	kl := withWindows(ws, llmrate.Window{Per: 24 * time.Hour, Requests: 100})
	r := llmrate.AdmitRequest{Key: "sk-a", Workspace: "acme", KeyLimits: kl, WorkspaceLimits: ws, Tokens: 10, ID: llmrate.NewAdmissionID()}
	d, err := s.Admit(ctx, r)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	// Charged twice the workspace's capacity (bounded there): deep debt.
	require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: r.Key, Workspace: r.Workspace, KeyLimits: kl, WorkspaceLimits: ws,
		Estimate: 10, Actual: 1 << 40, ID: r.ID}))

	plain.ID = llmrate.NewAdmissionID()
	d, err = s.Admit(ctx, plain)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the workspace is in debt: no admission on the lease it had")
	assert.Equal(t, llmrate.WorkspaceTokens, d.Refused)
	assert.Equal(t, leased, s.Leased(), "decided in Redis, not on the lease")
}

// TestWindowIdentityAcrossFigures: an admission resent under its ID after
// its figures gained or lost windows is never answered from the other
// script's record (whose levels could be misread): it is decided afresh.
func TestWindowIdentityAcrossFigures(t *testing.T) {
	s, _, _ := windowStore(t)
	ctx := context.Background()
	day := llmrate.Window{Per: 24 * time.Hour, Requests: 10}
	windowed := llmrate.AdmitRequest{Key: "sk-x", Workspace: "acme", KeyLimits: withWindows(roomy, day), WorkspaceLimits: withWindows(roomy, day),
		Tokens: 1, ID: llmrate.NewAdmissionID()} // two window buckets: a record of 7 doubles, as long as admit.lua's refusal
	d, err := s.Admit(ctx, windowed)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	plain := windowed
	plain.KeyLimits, plain.WorkspaceLimits = roomy, roomy
	d, err = s.Admit(ctx, plain)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "decided afresh, not read as a refusal")
	assert.Equal(t, [4]int64{2*roomy.RequestsPerMinute - 2, 2*roomy.TokensPerMinute - 2, 2*roomy.RequestsPerMinute - 2, 2*roomy.TokensPerMinute - 2}, d.Remaining)

	plain.ID = llmrate.NewAdmissionID()
	_, err = s.Admit(ctx, plain)
	require.NoError(t, err)
	windowed.ID = plain.ID
	d, err = s.Admit(ctx, windowed)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, []llmrate.WindowLevels{{Requests: 8}}, d.KeyWindows, "decided afresh: the window debited")
}

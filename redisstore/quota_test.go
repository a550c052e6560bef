package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/llmrate/llmrate"
	"github.com/llmrate/llmrate/internal/faultproxy"
	"github.com/llmrate/llmrate/internal/redistest"
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
		require.Equal(t, []llmrate.WindowLevels{{Requests: int64(2 - i), Reset: first.UnixNano()}}, normalize(d.KeyWindows))
		assert.True(t, redisstore.ReceiptInstant(d.Receipt).Equal(start), "the receipt holds the store's clock: %q", d.Receipt)
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
	assert.Equal(t, []llmrate.WindowLevels{{Requests: 2, Reset: march.UnixNano()}}, normalize(d.KeyWindows))

	// A request above the figure never fits.
	big := llmrate.Window{Calendar: llmrate.CalendarMonth, Zone: berlin, Tokens: 100}
	d = admit(t, s, llmrate.AdmitRequest{Key: "sk-big", Workspace: "acme", KeyLimits: roomy, WorkspaceLimits: withWindows(roomy, big), Tokens: 101})
	assert.False(t, d.Allowed)
	assert.True(t, d.NeverFits)
	assert.Equal(t, llmrate.WorkspaceTokens, d.Refused)
}

// normalize copies ls (Reset is an integer instant: levels compare by
// value as they are).
func normalize(ls []llmrate.WindowLevels) []llmrate.WindowLevels {
	return append([]llmrate.WindowLevels(nil), ls...)
}

// TestSessionWindowOpensAtTheFirstAdmission: a 5 h session of 2 requests
// opens at its first admitted request, holds its figure until 5 h after
// that (nothing refills within), then is full again; a refusal never
// opens one.
func TestSessionWindowOpensAtTheFirstAdmission(t *testing.T) {
	t0 := time.Unix(1_750_000_000, 0)
	s, clk, _ := quotaStore(t, t0)
	sess := llmrate.Window{Per: 5 * time.Hour, Session: true, Requests: 2}
	day := llmrate.Window{Calendar: llmrate.CalendarDay, Zone: time.UTC, Requests: 1}
	r := llmrate.AdmitRequest{Key: "sk-sess", Workspace: "acme", KeyLimits: withWindows(roomy, sess), WorkspaceLimits: roomy, Tokens: 1}
	assert.Equal(t, []llmrate.WindowLevels{{Requests: 2}}, peek(t, s, r).KeyWindows, "unused: full, no reset")

	// Refused by the workspace's daily quota: the key's session stays unused.
	ws := r
	ws.Key, ws.WorkspaceLimits = "sk-other", withWindows(roomy, day)
	require.True(t, admit(t, s, ws).Allowed)
	refused := r
	refused.WorkspaceLimits = ws.WorkspaceLimits
	d := admit(t, s, refused)
	require.False(t, d.Allowed)
	assert.Equal(t, llmrate.WorkspaceRequests, d.Refused)
	assert.Equal(t, llmrate.CalendarDay, d.Calendar)
	assert.Equal(t, []llmrate.WindowLevels{{Requests: 2}}, peek(t, s, r).KeyWindows, "a refusal opens no session")

	clk.add(time.Hour)
	opened := clk.now()
	d = admit(t, s, r)
	require.True(t, d.Allowed)
	assert.Equal(t, []llmrate.WindowLevels{{Requests: 1, Reset: opened.Add(5 * time.Hour).UnixNano()}}, normalize(d.KeyWindows))
	clk.add(time.Hour)
	require.True(t, admit(t, s, r).Allowed)
	clk.add(time.Hour) // nothing refills within
	d = admit(t, s, r)
	require.False(t, d.Allowed)
	assert.Equal(t, llmrate.KeyRequests, d.Refused)
	assert.True(t, d.Session)
	assert.Equal(t, 5*time.Hour, d.Window)
	assert.Equal(t, 3*time.Hour, d.RetryAfter, "to the session's end")

	clk.t = opened.Add(5*time.Hour - time.Microsecond)
	assert.False(t, admit(t, s, r).Allowed)
	clk.t = opened.Add(5 * time.Hour)
	d = admit(t, s, r)
	require.True(t, d.Allowed, "full again at the session's end; a new one opens")
	assert.Equal(t, []llmrate.WindowLevels{{Requests: 1, Reset: opened.Add(10 * time.Hour).UnixNano()}}, normalize(d.KeyWindows))
}

// TestLentPlanQuotaHoldsEveryModel is issue 42's repro on the store: a
// plan's daily token quota, lent to each model entry's request, is one
// quota: gpt-4o-mini spends it, then claude-* on the same key is refused
// by it (Lent), and a request without an entry spends the same buckets.
func TestLentPlanQuotaHoldsEveryModel(t *testing.T) {
	s, _, _ := quotaStore(t, time.Date(2026, time.March, 3, 9, 0, 0, 0, time.UTC))
	tokyo := zone(t, "Asia/Tokyo")
	plan := withWindows(roomy, llmrate.Window{Calendar: llmrate.CalendarDay, Zone: tokyo, Tokens: 1_000})
	entry := llmrate.Limits{RequestsPerMinute: 1_000, TokensPerMinute: llmrate.Unlimited,
		Windows: []llmrate.Window{{Per: time.Minute, InputTokens: 100_000}}}
	mini := llmrate.AdmitRequest{Key: "sk-plan", Workspace: "acme", Model: "gpt-4o-mini", KeyLimits: roomy, WorkspaceLimits: roomy,
		KeyPlan: &plan, WorkspacePlan: &roomy, Tokens: 600}
	d := admit(t, s, mini)
	require.True(t, d.Allowed)
	require.NotNil(t, d.Plan)
	require.Len(t, d.Plan.KeyWindows, 1)
	assert.Equal(t, int64(400), d.Plan.KeyWindows[0].Tokens)
	assert.Nil(t, d.KeyWindows)

	claude := llmrate.AdmitRequest{Key: "sk-plan", Workspace: "acme", Model: "claude-*", KeyLimits: entry, WorkspaceLimits: roomy,
		KeyPlan: &plan, WorkspacePlan: &roomy, Tokens: 500, InputTokens: 500}
	d = admit(t, s, claude)
	require.False(t, d.Allowed, "the plan's daily quota holds claude too")
	assert.Equal(t, llmrate.KeyTokens, d.Refused)
	assert.True(t, d.Lent)
	assert.Equal(t, llmrate.CalendarDay, d.Calendar)
	assert.Equal(t, "Asia/Tokyo", d.Zone)
	// 09:00 UTC is 18:00 in Tokyo: 6 h to its midnight.
	assert.Equal(t, 6*time.Hour, d.RetryAfter)
	assert.Equal(t, []llmrate.WindowLevels{{Tokens: 400, Reset: time.Date(2026, time.March, 4, 0, 0, 0, 0, tokyo).UnixNano()}}, normalize(d.Plan.KeyWindows))
	assert.Equal(t, []llmrate.WindowLevels{{InputTokens: 100_000}}, d.KeyWindows, "the entry's own window, untouched")

	claude.Tokens, claude.InputTokens = 400, 400
	d = admit(t, s, claude)
	require.True(t, d.Allowed)
	assert.Equal(t, int64(0), d.Plan.KeyWindows[0].Tokens)
	assert.Equal(t, int64(100_000-400), d.KeyWindows[0].InputTokens)

	// The default buckets' identity: a request without an entry spends the
	// same window.
	plain := llmrate.AdmitRequest{Key: "sk-plan", Workspace: "acme", KeyLimits: plan, WorkspaceLimits: roomy, Tokens: 1}
	d = admit(t, s, plain)
	require.False(t, d.Allowed)
	assert.False(t, d.Lent, "its own window")
	assert.Equal(t, llmrate.CalendarDay, d.Calendar)
}

// TestLentPlanGaugeHoldsEveryModel: a plan's concurrency cap, lent to
// model entries' requests, takes one slot per request whatever its model;
// the reconcile releases it.
func TestLentPlanGaugeHoldsEveryModel(t *testing.T) {
	s, _, _ := quotaStore(t, time.Unix(1_750_000_000, 0))
	ctx := context.Background()
	plan := roomy
	plan.ConcurrentRequests = 1
	a := llmrate.AdmitRequest{Key: "sk-g", Workspace: "acme", Model: "gpt-4o", KeyLimits: roomy, WorkspaceLimits: roomy,
		WorkspacePlan: &plan, Tokens: 1, ID: llmrate.NewAdmissionID()}
	d := admit(t, s, a)
	require.True(t, d.Allowed)
	b := a
	b.Model, b.ID = "claude-*", llmrate.NewAdmissionID()
	d = admit(t, s, b)
	require.False(t, d.Allowed)
	assert.Equal(t, llmrate.WorkspaceConcurrent, d.Refused)
	assert.True(t, d.Lent)
	assert.Equal(t, time.Second, d.RetryAfter)

	require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: a.Key, Workspace: a.Workspace, Model: a.Model, KeyLimits: roomy,
		WorkspaceLimits: roomy, WorkspacePlan: &plan, Estimate: 1, Actual: 1, ID: a.ID, Receipt: "g"}))
	assert.Zero(t, s.Held())
	d = admit(t, s, b)
	require.True(t, d.Allowed, "the slot is free again")
	require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: b.Key, Workspace: b.Workspace, Model: b.Model, KeyLimits: roomy,
		WorkspaceLimits: roomy, WorkspacePlan: &plan, Estimate: 1, Actual: 1, ID: b.ID, Receipt: d.Receipt}))
}

// TestLateReconcileLandsDebitsDropsCredits: a reconcile lands in its
// admission's period; once that period ended, a debit still owed (the
// charge minus the estimate) lands in the current one and a credit is
// dropped.
func TestLateReconcileLandsDebitsDropsCredits(t *testing.T) {
	day1 := time.Date(2026, time.May, 1, 23, 0, 0, 0, time.UTC)
	s, clk, _ := quotaStore(t, day1)
	ctx := context.Background()
	lim := withWindows(roomy, llmrate.Window{Calendar: llmrate.CalendarDay, Zone: time.UTC, Tokens: 100})
	r := llmrate.AdmitRequest{Key: "sk-late", Workspace: "acme", KeyLimits: lim, WorkspaceLimits: roomy, Tokens: 10}
	rec := func(d llmrate.Decision, est, actual int64, refund bool) {
		t.Helper()
		require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: r.Key, Workspace: r.Workspace, KeyLimits: lim, WorkspaceLimits: roomy,
			Estimate: est, Actual: actual, Receipt: d.Receipt, Refund: refund}))
	}
	level := func() int64 { t.Helper(); return peek(t, s, r).KeyWindows[0].Tokens }

	// In its period: a credit lands.
	d := admit(t, s, r)
	rec(d, 10, 4, false)
	assert.Equal(t, int64(96), level())

	// Late: the debit owed (30 - 10) lands in day 2.
	d = admit(t, s, r)
	assert.Equal(t, int64(86), level())
	clk.add(2 * time.Hour)
	assert.Equal(t, int64(100), level(), "day 2 starts full")
	rec(d, 10, 30, false)
	assert.Equal(t, int64(80), level())

	// Late credit and late refund: dropped.
	r.Tokens = 50
	d = admit(t, s, r)
	d2 := admit(t, s, llmrate.AdmitRequest{Key: r.Key, Workspace: r.Workspace, KeyLimits: lim, WorkspaceLimits: roomy, Tokens: 20})
	assert.Equal(t, int64(10), level())
	clk.add(24 * time.Hour)
	rec(d, 50, 0, false)
	rec(d2, 20, 0, true)
	assert.Equal(t, int64(100), level(), "day 3 starts full and never holds more")

	// A period ending in debt leaves the next full.
	r.Tokens = 100
	d = admit(t, s, r)
	rec(d, 100, 250, false) // 150 owed in this period: in debt
	assert.Equal(t, int64(-100), level(), "bounded at twice the figure: 200 charged")
	clk.add(24 * time.Hour)
	assert.Equal(t, int64(100), level())
}

// TestLateReconcileOpensASession: a debit still owed after its session
// ended opens a session at the reconcile's time; a credit opens nothing.
func TestLateReconcileOpensASession(t *testing.T) {
	t0 := time.Unix(1_750_000_000, 0)
	s, clk, _ := quotaStore(t, t0)
	ctx := context.Background()
	lim := withWindows(roomy, llmrate.Window{Per: time.Hour, Session: true, Tokens: 100})
	r := llmrate.AdmitRequest{Key: "sk-ls", Workspace: "acme", KeyLimits: lim, WorkspaceLimits: roomy, Tokens: 10}
	d := admit(t, s, r)
	clk.add(2 * time.Hour)
	require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: r.Key, Workspace: r.Workspace, KeyLimits: lim, WorkspaceLimits: roomy,
		Estimate: 10, Actual: 5, Receipt: d.Receipt}))
	assert.Equal(t, []llmrate.WindowLevels{{Tokens: 100}}, peek(t, s, r).KeyWindows, "a late credit opens nothing")
	require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: r.Key, Workspace: r.Workspace, KeyLimits: lim, WorkspaceLimits: roomy,
		Estimate: 10, Actual: 40, Receipt: d.Receipt}))
	assert.Equal(t, []llmrate.WindowLevels{{Tokens: 70, Reset: clk.now().Add(time.Hour).UnixNano()}}, normalize(peek(t, s, r).KeyWindows))
}

// TestTwoProcessesOnSkewedClocksCountOnePeriod: two stores (two gateway
// processes) whose limiters' clocks are a day apart, on one Redis (one
// server clock), count one calendar day.
func TestTwoProcessesOnSkewedClocksCountOnePeriod(t *testing.T) {
	_, c := redisrig.Start(t)
	clk := &fakeClock{t: time.Date(2026, time.June, 1, 23, 30, 0, 0, time.UTC)}
	ss := redisrig.Stores(t, c, 2, redisstore.WithClock(clk.now))
	lim := withWindows(roomy, llmrate.Window{Calendar: llmrate.CalendarDay, Zone: time.UTC, Requests: 4})
	for i := range 4 {
		r := llmrate.AdmitRequest{Key: "sk-two", Workspace: "acme", KeyLimits: lim, WorkspaceLimits: roomy, Tokens: 1,
			Now: clk.now().Add(time.Duration(2*(i%2)-1) * 24 * time.Hour)}
		require.True(t, admit(t, ss[i%2], r).Allowed, "admission %d", i)
	}
	for i := range 2 {
		d := admit(t, ss[i], llmrate.AdmitRequest{Key: "sk-two", Workspace: "acme", KeyLimits: lim, WorkspaceLimits: roomy, Tokens: 1})
		assert.False(t, d.Allowed, "store %d: one day's quota between them", i)
		assert.Equal(t, 30*time.Minute, d.RetryAfter)
	}
	clk.add(30 * time.Minute)
	for i := range 4 {
		require.True(t, admit(t, ss[i%2], llmrate.AdmitRequest{Key: "sk-two", Workspace: "acme", KeyLimits: lim, WorkspaceLimits: roomy, Tokens: 1}).Allowed)
	}
}

// TestPeekDebitsNothing: Peek reads the levels Admit would find, debits
// nothing, takes no slot and writes nothing.
func TestPeekDebitsNothing(t *testing.T) {
	berlin := zone(t, "Europe/Berlin")
	s, _, c := quotaStore(t, time.Date(2026, time.October, 25, 1, 30, 0, 0, time.UTC))
	g := roomy
	g.ConcurrentRequests = 1
	lim := withWindows(g, llmrate.Window{Calendar: llmrate.CalendarDay, Zone: berlin, Requests: 5, Tokens: 50},
		llmrate.Window{Per: time.Hour, Requests: 3})
	r := llmrate.AdmitRequest{Key: "sk-peek", Workspace: "acme", KeyLimits: lim, WorkspaceLimits: roomy, Tokens: 7, ID: llmrate.NewAdmissionID()}
	before := peek(t, s, r)
	assert.Zero(t, keyCount(t, c))
	// 25 October 2026 is Berlin's 25 h day: it ends at 23:00 UTC.
	end := time.Date(2026, time.October, 25, 23, 0, 0, 0, time.UTC)
	assert.Equal(t, []llmrate.WindowLevels{{Requests: 5, Tokens: 50, Reset: end.UnixNano()}, {Requests: 3}}, normalize(before.KeyWindows))
	assert.Equal(t, [4]int64{2_000_000, 2 * llmrate.MaxPerMinute, 2_000_000, 2 * llmrate.MaxPerMinute}, before.Remaining)
	d := admit(t, s, r)
	require.True(t, d.Allowed)
	after := peek(t, s, r)
	assert.Equal(t, normalize(d.KeyWindows), normalize(after.KeyWindows))
	assert.Equal(t, d.Remaining, after.Remaining)
	assert.False(t, after.Allowed)
	r.ID = llmrate.NewAdmissionID()
	assert.False(t, admit(t, s, r).Allowed, "the peek took no slot: the admission's is still held")
}

// TestSkewBeyondAPeriodSentAgain: without WithClock the store computes
// periods around the server's time as it last saw it; an idea of it more
// than a period off makes the script apply nothing and answer with the
// server's time (counted in Skews), and the admission is sent once more
// with periods around it: decided, debited once, no fail-open. (It failed
// open before, an error under the limiter.)
func TestSkewBeyondAPeriodSentAgain(t *testing.T) {
	_, c := redisrig.Start(t)
	s := redisrig.Store(t, c) // the server's TIME
	lim := withWindows(roomy, llmrate.Window{Calendar: llmrate.CalendarDay, Zone: time.UTC, Requests: 10})
	r := llmrate.AdmitRequest{Key: "sk-skew", Workspace: "acme", KeyLimits: lim, WorkspaceLimits: roomy, Tokens: 1}
	d := admit(t, s, r)
	require.True(t, d.Allowed)
	assert.WithinDuration(t, time.Now(), redisstore.ReceiptInstant(d.Receipt), time.Minute, "the receipt holds the server's clock")
	s.SawServer(time.Now().Add(-72 * time.Hour))
	d = admit(t, s, r)
	require.True(t, d.Allowed, "a bucket's recorded period in force is kept, whatever the store thinks")
	assert.Equal(t, int64(8), d.KeyWindows[0].Requests)
	s.SawServer(time.Now().Add(-72 * time.Hour))
	fresh := r
	fresh.Key = "sk-skew-fresh" // a bucket that needs a period
	d, err := s.Admit(context.Background(), fresh)
	require.NoError(t, err, "sent again with the server's periods, not failed open")
	require.True(t, d.Allowed)
	assert.Equal(t, int64(9), d.KeyWindows[0].Requests, "debited once: the skewed call applied nothing")
	assert.Equal(t, int64(1), s.Skews())
	d = admit(t, s, fresh)
	assert.Equal(t, int64(8), d.KeyWindows[0].Requests)

	s.SawServer(time.Now().Add(-20 * time.Hour)) // less than a period off: tolerated
	d = admit(t, s, r)
	require.True(t, d.Allowed)
	assert.Equal(t, int64(1), s.Skews())
}

// TestCalendarShortRefusesAReservation: a request a calendar window has no
// room for now is refused, not given a reservation across the period's
// start, with the exact wait to it.
func TestCalendarShortRefusesAReservation(t *testing.T) {
	end := time.Date(2026, time.July, 2, 0, 0, 0, 0, time.UTC)
	s, _, _ := quotaStore(t, end.Add(-2*time.Second))
	lim := withWindows(roomy, llmrate.Window{Calendar: llmrate.CalendarDay, Zone: time.UTC, Requests: 1})
	r := llmrate.AdmitRequest{Key: "sk-wait", Workspace: "acme", KeyLimits: lim, WorkspaceLimits: roomy, Tokens: 1, MaxWait: time.Minute}
	require.True(t, admit(t, s, r).Allowed)
	d := admit(t, s, r)
	assert.False(t, d.Allowed)
	assert.Zero(t, d.Wait)
	assert.Equal(t, 2*time.Second, d.RetryAfter)
}

// TestQuotaOneRoundTrip: an admission and a reconcile under a calendar
// window (and a session window, lent windows and gauges) each cost one
// command on the wire once the scripts are loaded.
func TestQuotaOneRoundTrip(t *testing.T) {
	_, c := redisrig.Start(t)
	h := &countHook{}
	c.AddHook(h)
	clk := &fakeClock{t: time.Date(2026, time.August, 31, 23, 0, 0, 0, time.UTC)}
	s := redisrig.Store(t, c, redisstore.WithClock(clk.now))
	berlin := zone(t, "Europe/Berlin")
	plan := withWindows(roomy, llmrate.Window{Calendar: llmrate.CalendarMonth, Zone: berlin, Tokens: 1_000_000})
	plan.ConcurrentRequests = 5
	entry := withWindows(roomy, llmrate.Window{Per: 5 * time.Hour, Session: true, Requests: 100})
	ctx := context.Background()
	for i := range 3 {
		r := llmrate.AdmitRequest{Key: "sk-rt", Workspace: "acme", Model: "claude-*", KeyLimits: entry, WorkspaceLimits: plan,
			KeyPlan: &plan, WorkspacePlan: &plan, Tokens: 10, ID: llmrate.NewAdmissionID()}
		before := h.n.Load()
		d := admit(t, s, r)
		require.True(t, d.Allowed)
		admitCmds := h.n.Load() - before
		before = h.n.Load()
		require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: r.Key, Workspace: r.Workspace, Model: r.Model, KeyLimits: entry,
			WorkspaceLimits: plan, KeyPlan: &plan, WorkspacePlan: &plan, Estimate: 10, Actual: 12, ID: r.ID, Receipt: d.Receipt}))
		if i > 0 { // the first loads the scripts (NOSCRIPT, then EVAL)
			assert.Equal(t, int64(1), admitCmds, "admission %d", i)
			assert.Equal(t, int64(1), h.n.Load()-before, "reconcile %d", i)
		}
	}
}

// TestLateDebitOpensTheSessionForEveryMeter: a late debit on one meter
// opens its window's session for all its meters at the reconcile's time,
// so an admission later in it keeps that end.
func TestLateDebitOpensTheSessionForEveryMeter(t *testing.T) {
	t0 := time.Unix(1_750_000_000, 0)
	s, clk, _ := quotaStore(t, t0)
	ctx := context.Background()
	lim := withWindows(roomy, llmrate.Window{Per: time.Hour, Session: true, Requests: 5, Tokens: 100})
	r := llmrate.AdmitRequest{Key: "sk-all", Workspace: "acme", KeyLimits: lim, WorkspaceLimits: roomy, Tokens: 10}
	d := admit(t, s, r)
	require.True(t, d.Allowed)
	clk.add(2 * time.Hour)
	opened := clk.now()
	require.NoError(t, s.Reconcile(ctx, llmrate.ReconcileRequest{Key: r.Key, Workspace: r.Workspace, KeyLimits: lim, WorkspaceLimits: roomy,
		Estimate: 10, Actual: 40, Receipt: d.Receipt}))
	end := opened.Add(time.Hour).UTC()
	assert.Equal(t, []llmrate.WindowLevels{{Requests: 5, Tokens: 70, Reset: end.UnixNano()}}, normalize(peek(t, s, r).KeyWindows))
	clk.add(30 * time.Minute)
	d = admit(t, s, r)
	require.True(t, d.Allowed)
	assert.Equal(t, []llmrate.WindowLevels{{Requests: 4, Tokens: 60, Reset: end.UnixNano()}}, normalize(d.KeyWindows), "the session the late debit opened")
	clk.t = end.Add(-time.Microsecond)
	r.Tokens = 61
	d = admit(t, s, r)
	require.False(t, d.Allowed)
	assert.Equal(t, time.Microsecond, d.RetryAfter)
}

// TestQuotasUnderLeases: with WithLeases, quota admissions and reconciles
// (Unlimited figures, a calendar window, a lent gauge) are decided in
// Redis on the levels the lease scripts keep, exactly as without leases.
func TestQuotasUnderLeases(t *testing.T) {
	for _, leases := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "leases"}[leases], func(t *testing.T) {
			var opts []redisstore.Option
			if leases {
				opts = append(opts, redisstore.WithLeases(0.25))
			}
			s, clk, _ := quotaStore(t, time.Date(2026, time.September, 30, 23, 0, 0, 0, time.UTC), opts...)
			ctx := context.Background()
			plan := withWindows(llmrate.Limits{RequestsPerMinute: 100, TokensPerMinute: llmrate.Unlimited},
				llmrate.Window{Calendar: llmrate.CalendarMonth, Zone: time.UTC, Tokens: 1_000})
			plan.ConcurrentRequests = 2
			entry := llmrate.Limits{RequestsPerMinute: llmrate.Unlimited, TokensPerMinute: 500}
			var ids []string
			var recs []llmrate.ReconcileRequest
			for i := range 3 {
				r := llmrate.AdmitRequest{Key: "sk-l", Workspace: "acme", Model: "claude-*", KeyLimits: entry, WorkspaceLimits: roomy,
					KeyPlan: &plan, WorkspacePlan: &roomy, Tokens: 300, ID: llmrate.NewAdmissionID()}
				d := admit(t, s, r)
				if i == 2 {
					require.False(t, d.Allowed)
					assert.Equal(t, llmrate.KeyConcurrent, d.Refused)
					assert.True(t, d.Lent)
					break
				}
				require.True(t, d.Allowed, "admission %d", i)
				assert.Equal(t, int64(1_000-300*(i+1)), d.Plan.KeyWindows[0].Tokens)
				assert.Equal(t, [4]int64{0, int64(1_000 - 300*(i+1)), 2_000_000 - int64(i+1), 2*llmrate.MaxPerMinute - int64(300*(i+1))}, d.Remaining)
				ids = append(ids, r.ID)
				recs = append(recs, llmrate.ReconcileRequest{Key: r.Key, Workspace: r.Workspace, Model: r.Model, KeyLimits: entry,
					WorkspaceLimits: roomy, KeyPlan: &plan, WorkspacePlan: &roomy, Estimate: 300, Actual: 100, ID: r.ID, Receipt: d.Receipt})
			}
			require.NoError(t, s.Reconcile(ctx, recs[0]))
			p := peek(t, s, llmrate.AdmitRequest{Key: "sk-l", Workspace: "acme", KeyLimits: plan, WorkspaceLimits: roomy, Tokens: 1})
			assert.Equal(t, int64(1_000-100-300), p.KeyWindows[0].Tokens, "the credit in its month")
			clk.add(2 * time.Hour) // October
			require.NoError(t, s.Reconcile(ctx, recs[1]))
			p = peek(t, s, llmrate.AdmitRequest{Key: "sk-l", Workspace: "acme", KeyLimits: plan, WorkspaceLimits: roomy, Tokens: 1})
			assert.Equal(t, int64(1_000), p.KeyWindows[0].Tokens, "a late credit dropped: October starts full")
			assert.Len(t, ids, 2)
		})
	}
}

// TestCalendarPeriodMovesOnlyPastItsRecordedEnd: a bucket moves to a new
// period only once the server's clock passes the end it recorded, so a
// clock that steps back over a boundary (a replica promoted a little
// behind) neither reopens the old period nor resets the new one.
func TestCalendarPeriodMovesOnlyPastItsRecordedEnd(t *testing.T) {
	midnight := time.Date(2026, time.November, 2, 0, 0, 0, 0, time.UTC)
	s, clk, _ := quotaStore(t, midnight.Add(-time.Second))
	lim := withWindows(roomy, llmrate.Window{Calendar: llmrate.CalendarDay, Zone: time.UTC, Requests: 2})
	r := llmrate.AdmitRequest{Key: "sk-back", Workspace: "acme", KeyLimits: lim, WorkspaceLimits: roomy, Tokens: 1}
	require.True(t, admit(t, s, r).Allowed)
	require.True(t, admit(t, s, r).Allowed)
	require.False(t, admit(t, s, r).Allowed, "1 November spent")
	clk.t = midnight.Add(time.Second)
	d := admit(t, s, r)
	require.True(t, d.Allowed, "2 November")
	next := midnight.Add(24 * time.Hour).UTC()
	assert.Equal(t, []llmrate.WindowLevels{{Requests: 1, Reset: next.UnixNano()}}, normalize(d.KeyWindows))
	clk.t = midnight.Add(-500 * time.Millisecond) // the clock steps back over the boundary
	assert.Equal(t, []llmrate.WindowLevels{{Requests: 1, Reset: next.UnixNano()}}, normalize(peek(t, s, r).KeyWindows), "the recorded period holds")
	d = admit(t, s, r)
	require.True(t, d.Allowed)
	assert.Equal(t, []llmrate.WindowLevels{{Requests: 0, Reset: next.UnixNano()}}, normalize(d.KeyWindows), "spent in 2 November's period, not a reopened 1st")
	clk.t = midnight.Add(2 * time.Second)
	assert.False(t, admit(t, s, r).Allowed, "2 November counted once")
}

// TestQuotaKeyNamesHoldNoRawNames: calendar, session and lent buckets are
// named by keyed hashes: no API key, workspace, model or zone name
// appears in a Redis key name.
func TestQuotaKeyNamesHoldNoRawNames(t *testing.T) {
	s, _, c := quotaStore(t, time.Unix(1_750_000_000, 0))
	berlin := zone(t, "Europe/Berlin")
	plan := withWindows(roomy, llmrate.Window{Calendar: llmrate.CalendarMonth, Zone: berlin, Requests: 10},
		llmrate.Window{Per: 5 * time.Hour, Session: true, Tokens: 1_000})
	plan.ConcurrentRequests = 3
	r := llmrate.AdmitRequest{Key: "sk-secret-key", Workspace: "acme-corp", Model: "claude-sonnet*", KeyLimits: plan, WorkspaceLimits: plan,
		KeyPlan: &plan, WorkspacePlan: &plan, Tokens: 10, ID: llmrate.NewAdmissionID()}
	d := admit(t, s, r)
	require.True(t, d.Allowed)
	ks, err := c.Keys(context.Background(), "*").Result()
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(ks), 8, "%q", ks)
	for _, k := range ks {
		for _, raw := range []string{"secret", "acme", "claude", "Berlin", "Europe"} {
			assert.NotContains(t, k, raw)
		}
	}
	require.NoError(t, s.Reconcile(context.Background(), llmrate.ReconcileRequest{Key: r.Key, Workspace: r.Workspace, Model: r.Model,
		KeyLimits: plan, WorkspaceLimits: plan, KeyPlan: &plan, WorkspacePlan: &plan, Estimate: 10, Actual: 10, ID: r.ID, Receipt: d.Receipt}))
}

// TestEndedSessionStaysEndedWhenTheClockStepsBack: a session found ended
// (here by a refused admission) is gone for good: a clock stepping back
// to before its end finds the window unused, not the old session's spend.
func TestEndedSessionStaysEndedWhenTheClockStepsBack(t *testing.T) {
	t0 := time.Unix(1_750_000_000, 0)
	s, clk, _ := quotaStore(t, t0)
	sess := withWindows(roomy, llmrate.Window{Per: time.Hour, Session: true, Requests: 1})
	day := withWindows(roomy, llmrate.Window{Calendar: llmrate.CalendarDay, Zone: time.UTC, Requests: 1})
	r := llmrate.AdmitRequest{Key: "sk-sb", Workspace: "acme", KeyLimits: sess, WorkspaceLimits: roomy, Tokens: 1}
	require.True(t, admit(t, s, r).Allowed)
	assert.False(t, admit(t, s, r).Allowed, "the session's one request spent")
	other := llmrate.AdmitRequest{Key: "sk-sb2", Workspace: "acme", KeyLimits: roomy, WorkspaceLimits: day, Tokens: 1}
	require.True(t, admit(t, s, other).Allowed)
	clk.t = t0.Add(time.Hour + time.Second)
	refused := r
	refused.WorkspaceLimits = day
	d := admit(t, s, refused)
	require.False(t, d.Allowed, "refused by the workspace's day")
	assert.Equal(t, []llmrate.WindowLevels{{Requests: 1}}, d.KeyWindows, "the session ended: unused")
	clk.t = t0.Add(time.Hour - time.Second) // the clock steps back before the old session's end
	assert.Equal(t, []llmrate.WindowLevels{{Requests: 1}}, peek(t, s, r).KeyWindows, "the ended session is not back")
}

// TestQuotaNoReservationRunningIntoTheNextPeriod: a reservation granted at
// 23:59:30 for a 60 s wait on the tokens bucket would run at 00:00:30 the
// next day, debited in the day that ended, and the next day would admit
// its whole figure beside it. It is refused instead (as the memory store
// does), and the next day admits its 3 and no more.
func TestQuotaNoReservationRunningIntoTheNextPeriod(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 23, 59, 30, 0, time.UTC)
	s, clk, _ := quotaStore(t, t0)
	lim := llmrate.Limits{RequestsPerMinute: 1000, TokensPerMinute: 100,
		Windows: []llmrate.Window{{Calendar: llmrate.CalendarDay, Zone: time.UTC, Requests: 3}}}
	r := llmrate.AdmitRequest{Key: "sk-res", Workspace: "acme", KeyLimits: lim, WorkspaceLimits: roomy, Tokens: 200}
	require.True(t, admit(t, s, r).Allowed, "drains the 200-token burst")
	r.Tokens, r.MaxWait = 100, 5*time.Minute
	d := admit(t, s, r)
	assert.False(t, d.Allowed, "its 60 s wait would end in the next day")
	assert.Equal(t, time.Minute, d.RetryAfter)
	clk.add(10 * time.Minute) // 00:09:30 on the 8th
	r.Tokens, r.MaxWait = 1, 0
	n := 0
	for range 5 {
		if admit(t, s, r).Allowed {
			n++
		}
	}
	assert.Equal(t, 3, n, "the new day holds its 3")
}

// TestSkewResendWithinWithTimeout: a skewed admission's second send
// shares the first's WithTimeout: a caller with no deadline of its own is
// never held past it, even when each reply takes 200 ms of a 300 ms
// WithTimeout (the second send is then cut at the deadline). The resend
// once had a WithTimeout of its own: 422 ms.
func TestSkewResendWithinWithTimeout(t *testing.T) {
	srv := redistest.Start(t)
	p := redisrig.Proxy(t, srv.Addr, 1)
	c := redisrig.NewClient(t, &redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	s := redisrig.Store(t, c, redisstore.WithBatching(1), redisstore.WithTimeout(300*time.Millisecond))
	lim := withWindows(roomy, llmrate.Window{Calendar: llmrate.CalendarDay, Zone: time.UTC, Requests: 10})
	r := llmrate.AdmitRequest{Key: "sk-skew", Workspace: "acme", KeyLimits: lim, WorkspaceLimits: roomy, Tokens: 1}
	require.True(t, admit(t, s, r).Allowed) // the server's time learned
	require.NoError(t, p.Set(faultproxy.Faults{SpikeReply: 1, Spike: 200 * time.Millisecond}))
	s.SawServer(time.Now().Add(-72 * time.Hour))
	fresh := r
	fresh.Key = "sk-skew-fresh" // a bucket that needs a period
	t0 := time.Now()
	_, err := s.Admit(context.Background(), fresh)
	took := time.Since(t0)
	t.Logf("err: %v", err) // a timeout, the second send cut at WithTimeout, is the bounded outcome
	assert.Equal(t, int64(1), s.Skews())
	assert.Less(t, took, 300*time.Millisecond+50*time.Millisecond, "the admission held its caller past WithTimeout")
}
